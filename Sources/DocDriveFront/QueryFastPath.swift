// QueryFastPath: `docdrive query` in its plain forms (paths, -0, --count), answered by the front
// over the control socket, without starting the full program.
//
// Anything it does not handle (--json, --watch, --help, a path as a scope, an unknown option, an
// error from the daemon, no daemon) returns nil and the full program runs the command, with its
// messages and exit codes: an error costs one more round trip, never a different answer.
//
// One protocol all the same: the line it sends is a `ControlRequest.query` with raw set, written by
// QueryWire with the keys JSONEncoder writes (ControlProtocolTests decodes it and compares); the
// daemon answers a raw query with QueryWire's raw answer, which begins with "=" and the protocol
// version: a daemon of another version answers otherwise, and the full program reports it.
import DocDriveWire
#if canImport(Glibc)
import Glibc
#endif

enum QueryFastPath {
    static let sorts: Set<String> = ["name", "size", "modified"]

    /// The exit status, or nil when the full program must answer.
    static func run(_ args: ArraySlice<String>) -> Int32? {
        var expression = [String](), scopes = [String](), seen = Set<String>()
        var sort: String?, reverse = false, limit: Int?, count = false, nul = false, home: String?
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
            // --name=value or --name value; a flag given twice goes to the full program.
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
                guard let v = value(), sorts.contains(v) else { return nil }
                sort = v
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

        let natural = sort != "name"  // size and modified: largest and newest first
        let line = QueryWire.requestLine(expr: expression, scopes: scopes, sort: sort, descending: sort.map { _ in reverse ? !natural : natural },
                                         limit: limit, count: count, pathsOnly: true, raw: true)
        guard let answer = ask(home + "/run", line), let (mountpoint, fields) = QueryWire.parseRaw(answer) else { return nil }

        var base = Array(mountpoint)
        if base.last == UInt8(ascii: "/") { base.removeLast() }
        var out = [UInt8]()
        if count {
            guard fields.count == 1 else { return nil }
            out = Array(fields[0]) + [0x0A]
        } else {
            out.reserveCapacity(fields.reduce(0) { $0 + $1.count + base.count + 2 })
            for p in fields {
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

    /// `DriveHome.fromEnvironment`, without Foundation.
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

    /// Sends the request to the daemon's control socket and reads the whole answer; nil if there
    /// is no daemon or it fails.
    static func ask(_ runPath: String, _ request: String) -> [UInt8]? {
        let s = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard s >= 0 else { return nil }
        defer { close(s) }
        guard connect(s, folder: runPath, name: QueryWire.controlSocketName) == 0 else { return nil }
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

    /// connect(2) to `folder/name`; through "/proc/self/fd/N/NAME" when the path is longer than
    /// sun_path holds (as the daemon binds it, UnixSocket.withAddress).
    static func connect(_ s: Int32, folder: String, name: String) -> Int32 {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        var dir: Int32 = -1
        defer { if dir >= 0 { close(dir) } }
        var path = Array((folder + "/" + name).utf8)
        if path.count >= capacity {
            dir = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard dir >= 0 else { return -1 }
            path = Array("/proc/self/fd/\(dir)/\(name)".utf8)
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { p in
            for (i, b) in path.enumerated() { p[i] = b }
            p[path.count] = 0
        }
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
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
