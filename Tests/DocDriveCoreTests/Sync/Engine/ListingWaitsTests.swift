// ListingWaitsTests: what waits for a listing of a store's remote (Sync/Engine/ListingWaits.swift).
import DocDriveCore
import XCTest

final class ListingWaitsTests: XCTestCase {
    /// A path waits from the poll count when it was first noticed, until it is decided.
    func testAPathWaitsFromWhenItWasFirstNoticed() {
        let polls = PollCounters()
        let w = ListingWaits(polls: polls)
        polls.start()
        XCTAssertEqual(w.noticed("a"), 1)
        polls.end(quiet: false)
        polls.start()
        XCTAssertEqual(w.noticed("a"), 1, "still from the first time")
        XCTAssertEqual(w.noticed("b"), 2)
        w.decided("a")
        XCTAssertEqual(w.noticed("a"), 2, "decided: waits anew")
        XCTAssertNil(w.broken)
    }

    /// A create is kept until a listing shows it; a write that is not a create forgets it; a
    /// listing made after it that shows another create there keeps it for its path's decision.
    func testACreateIsKeptUntilAListingShowsIt() {
        let polls = PollCounters()
        let w = ListingWaits(polls: polls)
        w.uploaded("a", version: "va", isCreate: true)
        w.uploaded("b", version: "vb", isCreate: true)
        w.uploaded("c", version: "vc", isCreate: true)
        XCTAssertEqual(w.unlistedCreate(at: "a"), "va")
        w.uploaded("c", version: "vc2", isCreate: false)
        XCTAssertNil(w.unlistedCreate(at: "c"), "replaced by a write that is not a create")
        var other = RemoteMeta()
        other.parent = RemoteMeta.created
        let items = [RemoteItem(path: "a", kind: .file, version: "va", size: 1),
                     RemoteItem(path: "b", kind: .file, version: "someone-else", size: 1, meta: other)]
        // A listing started before the creates (0 polls had ended): not forgotten for being absent.
        w.listed(items, at: ["a": 0, "b": 1], done: 0)
        XCTAssertNil(w.unlistedCreate(at: "a"), "shown")
        XCTAssertEqual(w.unlistedCreate(at: "b"), "vb", "replaced by another create: kept for its decision")
        w.forgetCreate(at: "b")
        XCTAssertEqual(w.createsKept, 0)
        XCTAssertNil(w.broken)
    }

    /// At most 10,000 creates are kept: the next empties the table first.
    func testCreatesAreEmptiedAtTheirLimit() {
        let w = ListingWaits(polls: PollCounters())
        XCTAssertEqual(ListingWaits.limit, 10_000)
        for k in 0..<ListingWaits.limit { w.uploaded(StorePath("f\(k)"), version: "v", isCreate: true) }
        XCTAssertEqual(w.createsKept, 10_000)
        w.uploaded("one-more", version: "v", isCreate: true)
        XCTAssertEqual(w.createsKept, 1)
        XCTAssertEqual(w.unlistedCreate(at: "one-more"), "v")
        XCTAssertNil(w.broken)
    }

    /// Each rule, broken on purpose, is named by `broken`.
    func testEachBrokenRuleIsNamed() {
        var s = ListingWaits.State(polls: PollCounters(started: 2, ended: 1))
        s.noticed = ["a": 2]
        s.creates = ["b": ("v", 2)]
        XCTAssertNil(s.broken)
        s.noticed["a"] = 3
        XCTAssertEqual(s.broken, "ListingWaits: a waits for a listing since poll 3, but 2 polls started")
        s.noticed["a"] = 1
        s.creates["b"] = ("v", 5)
        XCTAssertEqual(s.broken, "ListingWaits: the create at b was made at poll 5, but 2 polls started")
        s.creates = [:]
        for k in 0...ListingWaits.limit { s.creates[StorePath("f\(k)")] = ("v", 0) }
        XCTAssertEqual(s.broken, "ListingWaits: 10001 unlisted creates kept, more than 10000")
    }
}
