// ControlServer: the daemon's end of the control socket, how `docdrive open/import/.../query`
// reach it: a Unix socket in the drive home (mode 0600, only the daemon's own user or root), one
// request line per connection (ControlProtocol), decoded here and handed to the daemon's switch.
import CDocDriveSys
import DocDriveWire
import Foundation
import Logging
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

extension DriveHome {
    public var controlSocketPath: String { runPath + "/" + Self.controlSocketName }
    public static let controlSocketName = QueryWire.controlSocketName
}

/// The daemon's side. Each connection is served on its own thread (a copy may take a while).
public final class ControlServer: Sendable {
    private let listener: UnixSocketListener
    /// Answers a decoded request on its connection (once, or a stream of lines for a live query).
    private let handler: @Sendable (ControlRequest, ControlConnection) -> Void
    private let logger: Logger

    public init(home: DriveHome, logger: Logger, handler: @escaping @Sendable (ControlRequest, ControlConnection) -> Void) throws(DriveError) {
        self.logger = logger
        self.handler = handler
        listener = try UnixSocketListener(folder: home.runPath, name: DriveHome.controlSocketName, what: "the control socket")
    }

    public func start() {
        listener.start(thread: "docdrive-control", connectionThread: nil) { [self] c in serve(c) }
    }

    public func stop() {
        listener.stop()
    }

    private func serve(_ c: Int32) {
        defer { close(c) }
        let connection = ControlConnection(fd: c)
        var tv = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        // Only the daemon's own user (or root) may ask: the socket's mode says so too.
        let peer = dd_peer_uid(c)
        guard peer == Int64(geteuid()) || peer == 0 else {
            connection.send(DriveError(.notPermitted, "Only the drive's owner may control it."))
            return
        }
        let request: ControlRequest
        do throws(DriveError) {
            request = try ControlRequest.decode(Self.readLine(c))
        } catch {
            logger.debug("control: \(error.message)")
            connection.send(error)
            return
        }
        handler(request, connection)
    }

    /// The bytes before the first newline (or the end); stops reading once they are too many
    /// for a request, so that ControlRequest.decode refuses them.
    static func readLine(_ c: Int32) -> Data {
        var data = Data()
        var buf = [UInt8](repeating: 0, count: 8192)
        while data.count <= ControlProtocol.maxRequest {
            let n = read(c, &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            if let nl = buf[0..<n].firstIndex(of: 0x0A) {
                data.append(contentsOf: buf[0..<nl])
                break
            }
            data.append(contentsOf: buf[0..<n])
        }
        return data
    }
}

/// A command's connection, for the daemon's answer (or answers: a live query sends many).
public struct ControlConnection: Sendable {
    let fd: Int32

    /// Sends an answer line; false once the command is gone.
    @discardableResult
    public func send<A>(_ answer: ControlAnswer<A>) -> Bool { send(answer.line()) }

    @discardableResult
    public func send(_ error: DriveError) -> Bool { send(ControlAnswer<Never>.failed(error)) }

    /// Sends what `body` returns, or the error it throws.
    public func answer<A: Codable & Sendable>(_ body: () throws(DriveError) -> A) {
        do throws(DriveError) {
            send(ControlAnswer.ok(try body()))
        } catch {
            send(error)
        }
    }

    /// Sends bytes as they are (lines made beforehand, the query fast path's answer).
    @discardableResult
    public func send(_ data: Data) -> Bool {
        data.withUnsafeBytes { p -> Bool in
            var done = 0
            while done < p.count {
                let w = Glibc.send(fd, p.baseAddress! + done, p.count - done, Int32(MSG_NOSIGNAL))
                if w < 0 && errno == EINTR { continue }
                if w <= 0 { return false }
                done += w
            }
            return true
        }
    }

    /// Whether the command closed its end (a live query's command was interrupted).
    public var isClosed: Bool {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, 0) > 0 else { return false }
        var b = [UInt8](repeating: 0, count: 256)
        let n = recv(fd, &b, b.count, Int32(MSG_DONTWAIT))
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)
    }
}
