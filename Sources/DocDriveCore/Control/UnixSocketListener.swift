// UnixSocketListener: a listening Unix socket private to the daemon's user, and the thread that
// accepts on it. The control socket (ControlServer) and the desktop status socket
// (StatusServer) are both one; what they say on a connection is theirs.
import CDocDriveSys
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

final class UnixSocketListener: Sendable {
    /// The socket's path (removed by `stop`).
    let path: String
    private let fd: Int32
    private let stopped = Atomic<Bool>(false)

    /// Listens on `folder/name` (mode 0600; one left by an earlier daemon is replaced).
    /// `what` names the socket in the error ("the control socket").
    init(folder: String, name: String, what: String) throws(DriveError) {
        path = folder + "/" + name
        unlink(path)
        let s = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard s >= 0 else { throw DriveError.io("Cannot create \(what)", .init(rawValue: errno)) }
        // Created private: the daemon runs with umask 0, so mask it while binding.
        let old = umask(0o177)
        let r = Self.bind(s, folder: folder, name: name)
        umask(old)
        guard r == 0, chmod(path, 0o600) == 0, listen(s, 16) == 0 else {
            let e = errno
            close(s)
            throw DriveError.io("Cannot listen on \(path)", .init(rawValue: e))
        }
        fd = s
    }

    private static func bind(_ s: Int32, folder: String, name: String) -> Int32 {
        UnixSocket.withAddress(folder: folder, name: name) { Glibc.bind(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }

    var isStopped: Bool { stopped.load(ordering: .relaxed) }

    /// Accepts on a thread named `thread`; each connection is served by `serve` on a thread of
    /// its own (named `connectionThread`), which must close it.
    func start(thread: String, connectionThread: String?, serve: @escaping @Sendable (Int32) -> Void) {
        let t = Thread { [self] in
            while !isStopped {
                let c = dd_accept(fd)
                if c < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    if isStopped { return }
                    usleep(10_000)
                    continue
                }
                let conn = Thread { serve(c) }
                if let connectionThread { conn.name = connectionThread }
                conn.start()
            }
        }
        t.name = thread
        t.start()
    }

    /// Stops accepting and removes the socket (connections being served go on).
    func stop() {
        stopped.store(true, ordering: .relaxed)
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
        unlink(path)
    }
}

public enum UnixSocket {
    /// The address of `folder/name` for bind(2) or connect(2), through "/proc/self/fd/N/NAME":
    /// sun_path holds 107 bytes at most, and a drive home or a runtime folder may be longer.
    public static func withAddress(folder: String, name: String, _ body: (UnsafePointer<sockaddr>) -> Int32) -> Int32 {
        let dir = Glibc.open(folder, Sys.O_PATH | Sys.O_DIRECTORY | Sys.O_CLOEXEC)
        guard dir >= 0 else { return -1 }
        defer { Sys.close(dir) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array("/proc/self/fd/\(dir)/\(name)".utf8)
        withUnsafeMutableBytes(of: &addr.sun_path) { p in
            for (i, b) in bytes.enumerated() { p[i] = b }
            p[bytes.count] = 0
        }
        return withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0) } }
    }
}
