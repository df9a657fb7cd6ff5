// DownloadsTests: the drive's placeholder downloads (Sync/Downloads.swift), without a mount or a
// remote: at most a lane's slots run at once however many are asked, opens overtake queued
// readahead, one download per file, and a queued download gives way to an O_TRUNC open.
import DocDriveCore
import Foundation
import Synchronization
import XCTest

/// What the jobs of a test did: how many run now, the most at once, the order they started in.
final class JobLog: Sendable {
    struct State {
        var now = 0
        var peak = 0
        var started: [String] = []
        var priorities: [String: Downloads.Priority] = [:]
        var done = 0
    }
    let state = Mutex(State())
    /// Each job waits here once started, until the test lets one (or all) go.
    let gate = DispatchSemaphore(value: 0)

    func job(_ name: String) -> Downloads.Job {
        { [self] priority in
            state.withLock { s in
                s.now += 1
                s.peak = max(s.peak, s.now)
                s.started.append(name)
                s.priorities[name] = priority
            }
            gate.wait()
            state.withLock { $0.now -= 1 }
            return nil
        }
    }

    func waiter() -> Downloads.Waiter {
        { [self] _ in state.withLock { $0.done += 1 } }
    }

    var started: [String] { state.withLock { $0.started } }

    /// Waits (at most 10 s) until `cond` holds of the state; false if it never did.
    func until(_ cond: (State) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(10)
        while !state.withLock({ cond($0) }) {
            if Date() > deadline { return false }
            usleep(1_000)
        }
        return true
    }
}

final class DownloadsTests: XCTestCase {
    func testAtMostTheSlotsRunAtOnceHoweverManyAreAsked() {
        // Given a lane of 3 slots and 200 placeholders asked for at once (grep -r, xargs -P)
        let d = Downloads(), log = JobLog()
        for i in 0..<200 {
            d.request("s\0f\(i)", lane: "s", slots: 3, priority: i % 2 == 0 ? .open : .ahead, name: "t", job: log.job("f\(i)"), done: log.waiter())
        }
        // Then 3 run, on 3 threads; the rest wait their turn
        XCTAssertTrue(log.until { $0.started.count >= 3 })
        XCTAssertEqual(d.load(lane: "s").threads, 3)
        // When they are let go one by one
        for _ in 0..<200 { log.gate.signal() }
        XCTAssertTrue(log.until { $0.done == 200 }, "every waiter is told")
        // Then never more than 3 ran at once, every file was downloaded once, and the threads ended
        XCTAssertEqual(log.state.withLock { $0.peak }, 3)
        XCTAssertEqual(Set(log.started).count, 200)
        XCTAssertEqual(log.started.count, 200)
        let deadline = Date().addingTimeInterval(10)
        while d.load(lane: "s").threads > 0, Date() < deadline { usleep(1_000) }
        XCTAssertEqual(d.load(lane: "s").threads, 0)
    }

    func testAnOpenOvertakesQueuedReadahead() {
        // Given one slot busy with a download ahead, and three more queued ahead
        let d = Downloads(), log = JobLog()
        d.request("s\0a", lane: "s", slots: 1, priority: .ahead, name: "t", job: log.job("a"), done: log.waiter())
        XCTAssertTrue(log.until { $0.started == ["a"] })
        for n in ["b", "c", "d"] {
            d.request("s\0\(n)", lane: "s", slots: 1, priority: .ahead, name: "t", job: log.job(n), done: log.waiter())
        }
        // When a program opens another file, and then one that is queued ahead
        d.request("s\0e", lane: "s", slots: 1, priority: .open, name: "t", job: log.job("e"), done: log.waiter())
        d.request("s\0c", lane: "s", slots: 1, priority: .open, name: "t", job: log.job("c-again"), done: log.waiter())
        // Then the opens go next, in the order they came, then the readahead, each once
        for _ in 0..<5 { log.gate.signal() }
        XCTAssertTrue(log.until { $0.done == 6 })
        XCTAssertEqual(log.started, ["a", "e", "c", "b", "d"])
        XCTAssertEqual(log.state.withLock { $0.priorities["c"] }, .open, "an opened file is no readahead")
        XCTAssertEqual(log.state.withLock { $0.priorities["b"] }, .ahead)
    }

    func testOneDownloadPerFileForEveryoneWhoWaits() {
        let d = Downloads(), log = JobLog()
        // Given ten opens of one placeholder while its download runs or is queued
        for i in 0..<10 {
            d.request("s\0big", lane: "s", slots: 4, priority: .open, name: "t", job: log.job("big\(i)"), done: log.waiter())
        }
        XCTAssertTrue(log.until { $0.started.count == 1 })
        XCTAssertTrue(d.isRunning("s\0big"))
        log.gate.signal()
        // Then one download, and all ten are told
        XCTAssertTrue(log.until { $0.done == 10 })
        XCTAssertEqual(log.started, ["big0"])
        XCTAssertFalse(d.isAsked("s\0big"))
    }

    func testAQueuedDownloadGivesWayToATruncatingOpen() {
        // Given one slot busy, and a placeholder whose download is queued behind it
        let d = Downloads(), log = JobLog()
        d.request("s\0busy", lane: "s", slots: 1, priority: .open, name: "t", job: log.job("busy"), done: log.waiter())
        XCTAssertTrue(log.until { $0.started == ["busy"] })
        let told = Mutex<[DriveError?]>([])
        d.request("s\0doc", lane: "s", slots: 1, priority: .open, name: "t", job: log.job("doc"), done: { e in told.withLock { $0.append(e) } })
        // When an open with O_TRUNC takes it: at once, and the waiter finds the user's file
        var ran = false
        XCTAssertTrue(d.take("s\0doc") { ran = true })
        XCTAssertTrue(ran)
        XCTAssertEqual(told.withLock { $0.count }, 1)
        XCTAssertNil(told.withLock { $0.first ?? nil })
        // ...but not the one downloading now: that open waits for it
        XCTAssertFalse(d.take("s\0busy") { XCTFail("taken while downloading") })
        log.gate.signal()
        XCTAssertTrue(log.until { $0.done == 1 })
        // Then the taken file is never downloaded (the lane ends with nothing more started)
        let deadline = Date().addingTimeInterval(10)
        while d.load(lane: "s").threads > 0, Date() < deadline { usleep(1_000) }
        XCTAssertEqual(log.started, ["busy"])
        XCTAssertFalse(d.isAsked("s\0doc"))
    }
}
