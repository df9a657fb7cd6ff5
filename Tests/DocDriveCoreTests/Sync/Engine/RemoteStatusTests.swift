// RemoteStatusTests: what `docdrive status` shows of a store's remote (Sync/Engine/RemoteStatus.swift).
import DocDriveCore
import XCTest

final class RemoteStatusTests: XCTestCase {
    /// Offline and online again: the time and the reason come and go together; a poll counts.
    func testOfflineAndBackOnline() {
        let s = RemoteStatus()
        XCTAssertTrue(s.unreachable(at: 10, "no route"))
        XCTAssertFalse(s.unreachable(at: 20, "timed out"), "still offline")
        XCTAssertEqual(s.remote.offlineSince, 10, "since the first failure")
        XCTAssertEqual(s.remote.offlineReason, "timed out", "for the last reason")
        XCTAssertTrue(s.polled(at: 30, devices: ["laptop"]), "it was offline")
        XCTAssertEqual(s.remote, { var r = RemoteState(lastPoll: 30, devices: ["laptop"]); r.polls = 1; r.lastListing = 30; return r }())
        s.polledUnchanged(at: 40)
        XCTAssertEqual(s.remote.polls, 2)
        XCTAssertEqual(s.remote.lastPoll, 40)
        XCTAssertEqual(s.remote.lastListing, 30, "a poll that ended at the fingerprint listed nothing")
        s.held(at: 50, "it crashed the daemon")
        XCTAssertEqual(s.remote.offlineReason, "it crashed the daemon")
        s.retried()
        XCTAssertNil(s.remote.offlineSince)
        XCTAssertNil(s.broken)
    }

    /// A failed download is the store's problem until one succeeds; an unreachable remote makes
    /// an online store offline, and leaves an offline one's time as it was.
    func testAFillThatFailsIsShown() {
        let s = RemoteStatus()
        s.fillEnded(problem: "a.txt: no space", unreachable: false, at: 5, reason: "no space")
        XCTAssertEqual(s.remote.downloadProblem, "a.txt: no space")
        XCTAssertNil(s.remote.offlineSince)
        s.fillEnded(problem: "b.txt: no route", unreachable: true, at: 6, reason: "no route")
        XCTAssertEqual(s.remote.offlineSince, 6)
        s.fillEnded(problem: "c.txt: no route", unreachable: true, at: 7, reason: "still no route")
        XCTAssertEqual(s.remote.offlineSince, 6)
        XCTAssertEqual(s.remote.offlineReason, "no route")
        s.fillEnded(problem: nil)
        XCTAssertNil(s.remote.downloadProblem)
        XCTAssertNil(s.broken)
    }

    /// Downloads add to the content counted only once it was counted; what is shown is what was counted.
    func testTheContentKeptIsCountedThenGrows() {
        let s = RemoteStatus()
        s.cacheGrew(by: 4096)
        XCTAssertNil(s.cacheUse, "not counted yet")
        XCTAssertNil(s.remote.cacheBytes)
        s.cacheCounted(1000)
        s.cacheGrew(by: 24)
        XCTAssertEqual(s.cacheUse, 1024)
        XCTAssertEqual(s.remote.cacheBytes, 1024)
        XCTAssertNil(s.broken)
    }

    /// Each rule, broken on purpose, is named by `broken`.
    func testEachBrokenRuleIsNamed() {
        var s = RemoteStatus.State()
        XCTAssertNil(s.broken)
        s.remote.offlineSince = 1
        XCTAssertEqual(s.broken, "RemoteStatus: offline since a time, but for no reason")
        s.remote.offlineSince = nil
        s.remote.offlineReason = "why"
        XCTAssertEqual(s.broken, "RemoteStatus: offline for a reason, but since no time")
        s.remote.offlineReason = nil
        s.remote.polls = 3
        XCTAssertEqual(s.broken, "RemoteStatus: 3 polls, but no last poll")
        s.remote.polls = nil
        s.remote.lastPoll = 9
        XCTAssertEqual(s.broken, "RemoteStatus: a last poll, but no count of polls")
        s.remote.polls = 0
        XCTAssertEqual(s.broken, "RemoteStatus: 0 polls counted, with a last poll")
        s.remote.polls = 1
        s.remote.lastListing = 10
        XCTAssertEqual(s.broken, "RemoteStatus: a whole listing at 10.0, after the last poll (9.0)")
        s.remote.lastListing = 9
        s.cacheUse = 100
        XCTAssertEqual(s.broken, "RemoteStatus: no bytes of content shown, 100 counted")
        s.remote.cacheBytes = -5
        s.cacheUse = -5
        XCTAssertEqual(s.broken, "RemoteStatus: -5 bytes of content counted")
        s.remote.cacheBytes = 5
        s.cacheUse = 5
        XCTAssertNil(s.broken)
    }
}
