// FuseRequestReadTests: the reading of FUSE requests by libfuse's workers (requests.c), on pipes
// that carry fake request headers: what the release barrier makes of a worker that polls.
import CFuseTransport
import Foundation
import Synchronization
import XCTest

final class FuseRequestReadTests: XCTestCase {
    static let releaseOpcode: UInt32 = 18
    static let lookupOpcode: UInt32 = 1

    /// A request as the kernel sends it: fuse_in_header (len, opcode, unique, nodeid, uid, gid,
    /// pid, padding), 40 bytes, and no body.
    static func request(opcode: UInt32, unique: UInt64) -> [UInt8] {
        var b = [UInt8](repeating: 0, count: 40)
        withUnsafeBytes(of: UInt32(40).littleEndian) { b.replaceSubrange(0..<4, with: $0) }
        withUnsafeBytes(of: opcode.littleEndian) { b.replaceSubrange(4..<8, with: $0) }
        withUnsafeBytes(of: unique.littleEndian) { b.replaceSubrange(8..<16, with: $0) }
        return b
    }

    func pipePair() -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        XCTAssertEqual(pipe(&fds), 0)
        return (fds[0], fds[1])
    }

    func send(_ fd: Int32, _ bytes: [UInt8]) {
        XCTAssertEqual(bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }, bytes.count)
    }

    /// Reads one request the way a worker does; returns its length.
    static func readRequest(_ fd: Int32) -> Int {
        var buf = [UInt8](repeating: 0, count: 4096)
        return buf.withUnsafeMutableBytes { dd_fuse_read_request(fd, $0.baseAddress, $0.count) }
    }

    func testTheBarrierWaitsForAWorkerHoldingAnEarlierReleaseButNotForOneThatPolls() throws {
        // Long enough to look at the other worker while it polls, on a busy machine too.
        dd_fuse_set_spin_us(2_000_000)
        defer { dd_fuse_set_spin_us(DD_FUSE_SPIN_US) }
        let other = pipePair(), mine = pipePair()
        defer { [other.read, other.write, mine.read, mine.write].forEach { close($0) } }

        // The other worker reads a RELEASE queued before this worker's request, and holds it
        // until told to read again; then it polls its (empty) device.
        let holding = DispatchSemaphore(value: 0), readAgain = DispatchSemaphore(value: 0)
        let polled = DispatchSemaphore(value: 0)
        let otherRead = Atomic<Int>(0)
        send(other.write, Self.request(opcode: Self.releaseOpcode, unique: 10))
        let worker = Thread {
            otherRead.store(Self.readRequest(other.read), ordering: .relaxed)
            holding.signal()
            readAgain.wait()
            // Polls (the pipe is empty) until the test sends a request.
            _ = Self.readRequest(other.read)
            polled.signal()
        }
        worker.start()
        XCTAssertEqual(holding.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(otherRead.load(ordering: .relaxed), 40)

        send(mine.write, Self.request(opcode: Self.lookupOpcode, unique: 20))
        XCTAssertEqual(Self.readRequest(mine.read), 40)
        // The other worker holds RELEASE 10 < 20: the barrier waits, and gives up.
        XCTAssertEqual(dd_fuse_await_earlier_releases(200), -1)

        readAgain.signal()
        // Now it polls, before its read: it has taken nothing, and the barrier needs no wait.
        // (Counted as in its read and awake, it would be waited for until its poll ends.)
        let start = Date()
        XCTAssertEqual(dd_fuse_await_earlier_releases(1_000), 0)
        XCTAssertLessThan(Date().timeIntervalSince(start), 1.0)

        // A request ends its poll.
        send(other.write, Self.request(opcode: Self.lookupOpcode, unique: 30))
        XCTAssertEqual(polled.wait(timeout: .now() + 10), .success)
    }
}
