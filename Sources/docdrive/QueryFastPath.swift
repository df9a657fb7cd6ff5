// QueryFastPath: `docdrive query` in its plain forms (paths, -0, --count), answered before
// ArgumentParser is set up and without Foundation's JSON or the mount record.
//
// Why: the whole command is mostly the process starting. perf of `docdrive --version` put a
// third of its time in the dynamic loader and a quarter in the Swift runtime's protocol
// conformance scans, which ArgumentParser's reflection (String(describing:), Mirror, `as?`)
// and JSONSerialization's casts start. Everything here is plain String and Glibc.
// Anything it does not handle (--json, --watch, --help, a path as a scope, an unknown option, an
// error from the daemon) returns nil and the usual command runs, with its messages and exit
// codes: an error costs one more round trip, never a different answer.
//
// One protocol all the same: the line it sends is a `ControlRequest.query`, raw set, with the
// keys and the version field JSONEncoder writes (`Query.fastPathLine`, written by hand;
// ControlProtocolTests decodes it and compares). The daemon answers a raw query with the bytes
// `QueryService.raw` makes, which begin with "=" and the protocol version: a daemon of another
// version answers otherwise (an older one ignores the version), and the usual command then
// reports the mismatch.
import DocDriveCore
#if canImport(Glibc)
import Glibc
#endif

enum QueryFastPath {
    /// The exit status, or nil when the usual command must answer.
    static func run(_ args: ArraySlice<String>) -> Int32? {
        var expression = [String](), scopes = [String](), seen = Set<String>()
        var sort: QuerySort?, reverse = false, limit: Int?, count = false, nul = false, home: String?
        var i = args.startIndex
        while i < args.endIndex {
            let a = args[i]
            i += 1
            if a == "--" {
                expression += args[i...]
                break
            }
            guard a.hasPrefix("-"), a.count > 1 else {
                expression.append(a)
                continue
            }
            // --name=value or --name value; a flag given twice goes to the usual command.
            let parts = a.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0])
            var inline = parts.count == 2 ? String(parts[1]) : nil
            func value() -> String? {
                if let v = inline { inline = nil; return v }
                guard i < args.endIndex else { return nil }
                i += 1
                return args[i - 1]
            }
            if name != "--in" && !seen.insert(name).inserted { return nil }
            switch name {
            case "--in":
                guard let v = value(), let s = scope(v) else { return nil }
                scopes.append(s)
            case "--sort":
                guard let v = value(), let s = QuerySort(rawValue: v) else { return nil }
                sort = s
            case "--limit":
                guard let v = value(), let n = Int(v), n >= 0 else { return nil }
                limit = n
            case "--home":
                guard let v = value(), !v.isEmpty else { return nil }
                home = absolute(v)
            case "--count" where inline == nil: count = true
            case "--reverse" where inline == nil: reverse = true
            case "-0" where inline == nil: nul = true
            default: return nil
            }
        }
        if count && nul { return nil }
        guard let home = home ?? homeFromEnvironment() else { return nil }

        let natural = sort != .name  // size and modified: largest and newest first
        let request = ControlRequest.Query(expr: expression, scopes: scopes, sort: sort, descending: sort.map { _ in reverse ? !natural : natural },
                                           limit: limit, count: count, pathsOnly: true, raw: true)
        guard let answer = ask(home + "/run", request.fastPathLine()), answer.first == UInt8(ascii: "=") else { return nil }

        // "=" and the version, NUL, the mount point, NUL, then the count or each path, NUL-ended.
        let fields = answer.dropFirst().split(separator: 0, omittingEmptySubsequences: false).dropLast()
        guard fields.count >= 2, Array(fields[fields.startIndex]) == Array(String(ControlProtocol.version).utf8) else { return nil }
        var base = Array(fields[fields.startIndex + 1])
        if base.last == UInt8(ascii: "/") { base.removeLast() }
        var out = [UInt8]()
        if count {
            guard fields.count == 3 else { return nil }
            out = Array(fields[fields.startIndex + 2]) + [0x0A]
        } else {
            for p in fields.dropFirst(2) {
                out += base
                out.append(UInt8(ascii: "/"))
                out += p
                out.append(nul ? 0 : 0x0A)
            }
        }
        return writeAll(1, out) ? 0 : 1
    }

    /// A scope as `Query.scope` makes it; nil for a path that must be made mount-relative.
    static func scope(_ s: String) -> String? {
        if s.hasPrefix("/") || s.hasPrefix("./") || s.hasPrefix("../") || s == "." || s == ".." { return nil }
        if s.contains("/") { return "folder:" + s.split(separator: "/").joined(separator: "/") }
        return s
    }

    /// `DriveHome.fromEnvironment`, without ProcessInfo.
    static func homeFromEnvironment() -> String? {
        func env(_ name: String) -> String? {
            guard let p = getenv(name) else { return nil }
            let v = String(cString: p)
            return v.isEmpty ? nil : v
        }
        if let h = env("DOCDRIVE_HOME") { return absolute(h) }
        if let x = env("XDG_DATA_HOME") { return absolute(x) + "/docdrive" }
        if let h = env("HOME") { return h + "/.local/share/docdrive" }
        return nil
    }

    static func absolute(_ p: String) -> String {
        var path = p
        if !p.hasPrefix("/") {
            guard let cwd = getcwd(nil, 0) else { return p }
            defer { free(cwd) }
            path = String(cString: cwd) + "/" + p
        }
        return path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    /// Sends the request to the daemon's control socket (as `ControlClient` does) and reads the
    /// whole answer; nil if there is no daemon or it fails.
    static func ask(_ runPath: String, _ request: String) -> [UInt8]? {
        let s = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard s >= 0 else { return nil }
        defer { close(s) }
        let r = UnixSocket.withAddress(folder: runPath, name: DriveHome.controlSocketName) {
            connect(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
        guard r == 0 else { return nil }
        var tv = timeval(tv_sec: 600, tv_usec: 0)
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        guard writeAll(s, Array(request.utf8)) else { return nil }
        var answer = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(s, &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return nil }
            if n == 0 { return answer }
            answer += buf[0..<n]
        }
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { p in
            var done = 0
            while done < p.count {
                let w = write(fd, p.baseAddress! + done, p.count - done)
                if w < 0 && errno == EINTR { continue }
                if w <= 0 { return false }
                done += w
            }
            return true
        }
    }
}
