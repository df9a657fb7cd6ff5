// ControlSocket: how `docdrive open/import/move/export/bookmark/grants` reach the running daemon:
// a Unix socket in the drive home (mode 0600, only the daemon's own user or root), one JSON
// request line and one JSON answer line per connection.
import CDocDriveSys
import Foundation
import Logging
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

extension DriveHome {
    public var controlSocketPath: String { runPath + "/control.sock" }
}

/// The daemon's side. Each connection is served on its own thread (a copy may take a while).
public final class ControlServer: Sendable {
    private let path: String
    private let fd: Int32
    private let handler: @Sendable ([String: Any]) -> [String: Any]
    /// Serves a request that answers with a stream of lines (a live query) on the connection
    /// itself; returns false for the others, which `handler` answers.
    private let stream: (@Sendable ([String: Any], Int32) -> Bool)?
    private let logger: Logger
    private let stopped = Atomic<Bool>(false)

    /// Largest request accepted (a token is at most 8 KiB).
    static let maxRequest = 64 * 1024

    public init(home: DriveHome, logger: Logger, stream: (@Sendable ([String: Any], Int32) -> Bool)? = nil,
                handler: @escaping @Sendable ([String: Any]) -> [String: Any]) throws(DriveError) {
        path = home.controlSocketPath
        self.logger = logger
        self.handler = handler
        self.stream = stream
        unlink(path)
        let s = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard s >= 0 else { throw DriveError.io("Cannot create the control socket", .init(rawValue: errno)) }
        // Created private: the daemon runs with umask 0, so mask it while binding.
        let old = umask(0o177)
        let r = Self.withAddress(home) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        umask(old)
        guard r == 0, chmod(path, 0o600) == 0, listen(s, 16) == 0 else {
            let e = errno
            close(s)
            throw DriveError.io("Cannot listen on \(path)", .init(rawValue: e))
        }
        fd = s
    }

    /// The socket's address. A path in sun_path may have 107 bytes at most, so the run folder
    /// is named through a descriptor ("/proc/self/fd/N/control.sock"): any drive home works.
    static func withAddress(_ home: DriveHome, _ body: (UnsafePointer<sockaddr>) -> Int32) -> Int32 {
        let dir = Glibc.open(home.runPath, Sys.O_PATH | Sys.O_DIRECTORY | Sys.O_CLOEXEC)
        guard dir >= 0 else { return -1 }
        defer { Sys.close(dir) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array("/proc/self/fd/\(dir)/control.sock".utf8)
        withUnsafeMutableBytes(of: &addr.sun_path) { p in
            for (i, b) in bytes.enumerated() { p[i] = b }
            p[bytes.count] = 0
        }
        return withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0) } }
    }

    public func start() {
        let t = Thread { [self] in
            while !stopped.load(ordering: .relaxed) {
                let c = dd_accept(fd)
                if c < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    if stopped.load(ordering: .relaxed) { return }
                    usleep(10_000)
                    continue
                }
                let conn = Thread { [self] in serve(c) }
                conn.start()
            }
        }
        t.name = "docdrive-control"
        t.start()
    }

    public func stop() {
        stopped.store(true, ordering: .relaxed)
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
        unlink(path)
    }

    private func serve(_ c: Int32) {
        defer { close(c) }
        var tv = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        // Only the daemon's own user (or root) may ask: the socket's mode says so too.
        let peer = dd_peer_uid(c)
        guard peer == Int64(geteuid()) || peer == 0 else {
            Self.send(c, ["ok": false, "code": "notPermitted", "error": "Only the drive's owner may control it."])
            return
        }
        var data = Data()
        var buf = [UInt8](repeating: 0, count: 8192)
        while data.count <= Self.maxRequest, !data.contains(0x0A) {
            let n = read(c, &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            data.append(contentsOf: buf[0..<n])
        }
        guard data.count <= Self.maxRequest,
              let request = (try? JSONSerialization.jsonObject(with: data.prefix { $0 != 0x0A })) as? [String: Any] else {
            Self.send(c, ["ok": false, "code": "usage", "error": "The request is not one JSON object on one line."])
            return
        }
        if let stream, stream(request, c) { return }
        Self.send(c, handler(request))
    }

    static func send(_ c: Int32, _ answer: [String: Any]) {
        guard var data = try? JSONSerialization.data(withJSONObject: answer, options: [.sortedKeys]) else { return }
        data.append(0x0A)
        data.withUnsafeBytes { p in
            var done = 0
            while done < p.count {
                let w = write(c, p.baseAddress! + done, p.count - done)
                if w < 0 && errno == EINTR { continue }
                if w <= 0 { return }
                done += w
            }
        }
    }
}

/// The commands' side: one request, one answer (or a stream of them, see `stream`).
public enum ControlClient {
    /// Connects to the daemon and sends `request`; the socket, for reading the answer (the
    /// caller closes it). `timeout`: seconds a read may wait (0: for ever).
    static func send(_ home: DriveHome, _ request: [String: Any], timeout: Int) throws(DriveError) -> Int32 {
        guard home.liveMountRecord() != nil else {
            throw DriveError(.notMounted, "The drive is not mounted; mount it first (`docdrive mount DIR`).")
        }
        let s = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard s >= 0 else { throw DriveError.io("Cannot create a socket", .init(rawValue: errno)) }
        let r = ControlServer.withAddress(home) { connect(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        guard r == 0 else {
            let e = errno
            close(s)
            throw DriveError(.notMounted, "The drive's daemon does not answer on \(home.controlSocketPath) (\(Errno(rawValue: e).readableDescription)); is it mounted?")
        }
        if timeout > 0 {
            var tv = timeval(tv_sec: timeout, tv_usec: 0)
            setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        }
        guard var data = try? JSONSerialization.data(withJSONObject: request) else {
            close(s)
            throw DriveError(.invalidName, "The request cannot be encoded.")
        }
        data.append(0x0A)
        let sent = data.withUnsafeBytes { write(s, $0.baseAddress!, $0.count) }
        guard sent == data.count else {
            let e = errno
            close(s)
            throw DriveError.io("Cannot talk to the daemon", .init(rawValue: e))
        }
        return s
    }

    public static func call(_ home: DriveHome, _ request: [String: Any], timeout: Int = 600) throws(DriveError) -> [String: Any] {
        let s = try send(home, request, timeout: timeout)
        defer { close(s) }
        var answer = Data()
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(s, &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw DriveError.io("The daemon did not answer", .init(rawValue: errno)) }
            if n == 0 { break }
            answer.append(contentsOf: buf[0..<n])
        }
        guard let obj = (try? JSONSerialization.jsonObject(with: answer)) as? [String: Any] else {
            throw DriveError(.io, "The daemon's answer could not be read (did it stop?).")
        }
        if obj["ok"] as? Bool == true { return obj["result"] as? [String: Any] ?? [:] }
        let message = obj["error"] as? String ?? "The daemon refused the request."
        throw DriveError(DriveError.Code(named: obj["code"] as? String ?? ""), message)
    }
}

extension DocumentService {
    /// Runs one control request: {"command": ..., args...} -> {"ok": true, "result": {...}}.
    public func handle(_ r: [String: Any]) -> [String: Any] {
        func s(_ k: String) -> String? { r[k] as? String }
        func need(_ k: String) throws(DriveError) -> String {
            guard let v = s(k), !v.isEmpty else { throw DriveError(.invalidName, "The request lacks \(k).") }
            return v
        }
        let noRename = r["noRename"] as? Bool ?? false
        do throws(DriveError) {
            let result: [String: Any]
            switch s("command") ?? "" {
            case "open":
                result = try open(app: need("app"), path: need("path"), as: s("as"), into: s("into"), noRename: noRename)
            case "import":
                result = try importDocument(app: need("app"), path: need("path"))
            case "move":
                result = try move(app: need("app"), path: need("path"), to: need("to"), noRename: noRename)
            case "export":
                result = try export(app: need("app"), path: need("path"), to: need("to"), noRename: noRename)
            case "bookmark-create":
                result = try createBookmark(app: need("app"), path: need("path"))
            case "bookmark-resolve":
                result = try resolveBookmark(app: need("app"), token: need("token"))
            case "grants-list":
                result = ["grants": try listGrants(app: s("app"))]
            case "grants-revoke":
                result = try revokeGrant(app: need("app"), path: need("path"))
            case "app-close":
                result = try closeApp(need("app"))
            case "references":
                result = ["references": references()]
            case "sync-poll":
                // Looks at every store's remote now and answers once that look is done.
                guard let up = fs.uploader else { result = [:]; break }
                let marks = up.pollNow()
                let deadline = Date().addingTimeInterval(min(120, max(0.5, r["timeout"] as? Double ?? 120)))
                while !up.polledSince(marks) && Date() < deadline { usleep(20_000) }
                var stores = [String: Any]()
                for (name, st) in up.remoteStates() {
                    var d: [String: Any] = ["devices": st.devices]
                    if let t = st.lastPoll { d["lastPoll"] = t }
                    if let t = st.offlineSince { d["offlineSince"] = t }
                    if let r = st.offlineReason { d["offlineReason"] = r }
                    stores[name] = d
                }
                result = ["stores": stores]
            case "index-error":
                result = fs.uploader?.lastIndexWriteError().map { ["error": $0] } ?? [:]
            default:
                throw DriveError(.invalidName, "Unknown request \"\(s("command") ?? "")\".")
            }
            return ["ok": true, "result": result]
        } catch {
            return ["ok": false, "code": error.code.description, "error": error.message]
        }
    }
}
