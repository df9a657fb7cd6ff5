// StatusProtocol: the desktop status socket's line protocol (file managers' emblems): the
// requests it reads, the lines it writes, and how a field is escaped. Written down in README.md
// ("File manager status"); StatusServer serves it.
import Foundation

/// One line per message, fields separated by a tab. In a field, a backslash, a tab, a newline
/// and a carriage return are written `\\`, `\t`, `\n` and `\r`; anything else goes as it is
/// (UTF-8: a path whose name is not is answered `none`). Paths are absolute, as the file manager
/// has them.
///
///     < docdrive-status  1  /home/u/Drive  /home/u/.local/share/docdrive     (on connecting)
///     > status  /home/u/Drive/Work/a.odt  /home/u/Drive/Work/b.odt
///     < status  /home/u/Drive/Work/a.odt  synced  pinned
///     < status  /home/u/Drive/Work/b.odt  pending  -
///     < done
///     > subscribe  /home/u/Drive/Work
///     < done
///     < status  /home/u/Drive/Work/b.odt  uploading  -                       (when it changes)
///     > conflicts  /home/u/Drive/Work
///     < conflict  /home/u/Drive/Work/c.odt  /home/u/Drive/Work/c (conflict from laptop 2026-11-26 0102).odt  laptop
///     < done
///     < error  Unknown request "stat".
public enum StatusProtocol {
    public static let version = 1
    /// The longest request line read (a batch of a few thousand paths).
    public static let maxLine = 4 * 1024 * 1024

    /// What `status` says of a path: its FileState, by name.
    public typealias State = FileState

    public static func escape(_ s: String) -> String {
        guard s.utf8.contains(where: { $0 == 0x5C || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }) else { return s }
        var out = ""
        for c in s.unicodeScalars {
            switch c {
            case "\\": out += "\\\\"
            case "\t": out += "\\t"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    /// The fields of a line (without its newline); nil when an escape is not one of the four.
    public static func fields(_ line: Substring) -> [String]? {
        var out = [String]()
        for raw in line.split(separator: "\t", omittingEmptySubsequences: false) {
            guard raw.contains("\\") else {
                out.append(String(raw))
                continue
            }
            var s = ""
            var it = raw.unicodeScalars.makeIterator()
            while let c = it.next() {
                guard c == "\\" else {
                    s.unicodeScalars.append(c)
                    continue
                }
                switch it.next() {
                case "\\": s += "\\"
                case "t": s += "\t"
                case "n": s += "\n"
                case "r": s += "\r"
                default: return nil
                }
            }
            out.append(s)
        }
        return out
    }

    /// A line of fields, escaped, with its newline.
    public static func line(_ fields: [String]) -> String {
        fields.map(escape).joined(separator: "\t") + "\n"
    }

    public static func greeting(mountpoint: String, home: String) -> String {
        line(["docdrive-status", String(version), mountpoint, home])
    }

    public static func statusLine(_ path: String, _ state: State, pinned: Bool) -> String {
        line(["status", path, state.rawValue, pinned ? "pinned" : "-"])
    }
}

/// A request line, read.
public enum StatusRequest: Equatable, Sendable {
    /// The state of each path.
    case status([String])
    /// Tell, from now on, the new state of any file at or under these folders that changes.
    case subscribe([String])
    case unsubscribe([String])
    /// The conflicts of these documents (or copies), or of every document under these folders.
    case conflicts([String])

    /// The request on a line, or the sentence of the `error` line to answer instead.
    public static func parse(_ line: Substring) -> Result<StatusRequest, StatusProtocolError> {
        guard let f = StatusProtocol.fields(line), let command = f.first else {
            return .failure(StatusProtocolError("The line has an escape other than \\\\, \\t, \\n and \\r."))
        }
        let paths = Array(f.dropFirst())
        if let bad = paths.first(where: { !$0.hasPrefix("/") }) {
            return .failure(StatusProtocolError("\"\(bad)\" is not an absolute path."))
        }
        switch command {
        case "status": return .success(.status(paths))
        case "subscribe": return .success(.subscribe(paths))
        case "unsubscribe": return .success(.unsubscribe(paths))
        case "conflicts": return .success(.conflicts(paths))
        default: return .failure(StatusProtocolError("Unknown request \"\(command)\" (status, subscribe, unsubscribe, conflicts)."))
        }
    }
}

/// What the `error` line says: the one error of this layer (a request it cannot read).
public struct StatusProtocolError: Error, Equatable, Sendable {
    public let message: String
    public init(_ message: String) { self.message = message }
}
