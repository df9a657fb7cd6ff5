// ControlClient: the commands' end of the control socket: one request, its typed answer (or a
// stream of them, for a live query).
import Foundation
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

public enum ControlClient {
    /// Sends `command` and answers what the daemon answers to it.
    /// `timeout`: seconds the answer may take (0: for ever).
    public static func call<C: ControlCommand>(_ home: DriveHome, _ command: C, timeout: Int = 600) throws(DriveError) -> C.Answer {
        let s = try send(home, command.request, timeout: timeout)
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
        return try ControlAnswer<C.Answer>.decode(answer).get()
    }

    /// Sends `request` and hands each answer line to `each` until it returns false or the daemon
    /// closes the connection (a live query).
    public static func stream<A: Codable & Sendable>(_ home: DriveHome, _ request: ControlRequest, _ each: (A) throws -> Bool) throws {
        let s = try send(home, request, timeout: 0)
        defer { close(s) }
        var pending = Data()
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(s, &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw DriveError.io("The daemon did not answer", .init(rawValue: errno)) }
            if n == 0 { return }
            pending.append(contentsOf: buf[0..<n])
            while let nl = pending.firstIndex(of: 0x0A) {
                let line = pending[pending.startIndex..<nl]
                pending = Data(pending[(nl + 1)...])
                if try !each(ControlAnswer<A>.decode(line).get()) { return }
            }
        }
    }

    /// Connects to the daemon and sends `request`; the socket, for reading the answer (the
    /// caller closes it). `timeout`: seconds a read may wait (0: for ever).
    static func send(_ home: DriveHome, _ request: ControlRequest, timeout: Int) throws(DriveError) -> Int32 {
        guard home.liveMountRecord() != nil else {
            throw DriveError(.notMounted, "The drive is not mounted; mount it first (`docdrive mount DIR`).")
        }
        let s = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard s >= 0 else { throw DriveError.io("Cannot create a socket", .init(rawValue: errno)) }
        let r = UnixSocket.withAddress(folder: home.runPath, name: DriveHome.controlSocketName) { connect(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        guard r == 0 else {
            let e = errno
            close(s)
            throw DriveError(.notMounted, "The drive's daemon does not answer on \(home.controlSocketPath) (\(Errno(rawValue: e).readableDescription)); is it mounted?")
        }
        if timeout > 0 {
            var tv = timeval(tv_sec: timeout, tv_usec: 0)
            setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        }
        guard ControlConnection(fd: s).send(request.line()) else {
            let e = errno
            close(s)
            throw DriveError.io("Cannot talk to the daemon", .init(rawValue: e))
        }
        return s
    }
}
