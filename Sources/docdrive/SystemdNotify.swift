// SystemdNotify: the sd_notify protocol (one datagram to $NOTIFY_SOCKET), so that a systemd unit
// of Type=notify knows when the mount serves (READY=1), how the uploads go (STATUS=) and when the
// daemon drains before it exits (STOPPING=1).
import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct SystemdNotify: Sendable {
    /// $NOTIFY_SOCKET: a path, or an abstract socket name starting with "@".
    let socketPath: String

    /// nil when the daemon was not started by systemd (or another service manager that speaks it).
    static func fromEnvironment() -> SystemdNotify? {
        guard let p = ProcessInfo.processInfo.environment["NOTIFY_SOCKET"], !p.isEmpty,
              p.hasPrefix("/") || p.hasPrefix("@") else { return nil }
        return SystemdNotify(socketPath: p)
    }

    /// Sends `state` ("READY=1\nSTATUS=..."): one sendto on a datagram socket. Best effort: a
    /// manager that went away must not stop the drive.
    @discardableResult
    func send(_ state: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        var path = Array(socketPath.utf8)
        if path.first == UInt8(ascii: "@") { path[0] = 0 }  // the abstract namespace
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard path.count < capacity else { return false }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            raw.copyBytes(from: path)
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count + (path.first == 0 ? 0 : 1))
        let sent = state.utf8CString.withUnsafeBufferPointer { buf in
            withUnsafePointer(to: &addr) { a in
                a.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                    sendto(fd, buf.baseAddress, buf.count - 1, Int32(MSG_NOSIGNAL), sa, length)
                }
            }
        }
        return sent == state.utf8.count
    }
}
