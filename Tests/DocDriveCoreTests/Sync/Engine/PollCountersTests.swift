// PollCountersTests: the polls of a store started, ended and quiet (Sync/Engine/PollCounters.swift).
import DocDriveCore
import XCTest

final class PollCountersTests: XCTestCase {
    /// Starts and ends are counted; a quiet end counts as ended too; a wanted poll is taken once.
    func testPollsAreCountedAsTheyStartAndEnd() {
        let p = PollCounters()
        p.start()
        XCTAssertEqual([p.started, p.ended, p.quiet], [1, 0, 0])
        p.end(quiet: false)
        p.start()
        p.start()  // a reconcile's poll beside the poller's
        p.end(quiet: true)
        XCTAssertEqual([p.started, p.ended, p.quiet], [3, 2, 1])
        XCTAssertNil(p.broken)
        XCTAssertFalse(p.takeWanted())
        p.want()
        p.want()
        XCTAssertTrue(p.takeWanted())
        XCTAssertFalse(p.takeWanted(), "taken once")
    }

    /// Each rule, broken on purpose, is named by `broken`.
    func testEachBrokenRuleIsNamed() {
        XCTAssertNil(PollCounters(started: 3, ended: 3, quiet: 3).broken)
        XCTAssertEqual(PollCounters(started: 2, ended: 3, quiet: 0).broken, "PollCounters: 3 polls ended of 2 started")
        XCTAssertEqual(PollCounters(started: 5, ended: 3, quiet: 4).broken, "PollCounters: 4 quiet polls of 3 ended")
    }
}
