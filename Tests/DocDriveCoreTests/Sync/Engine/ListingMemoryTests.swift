// ListingMemoryTests: what the last listing of a store's remote showed (Sync/Engine/ListingMemory.swift).
import DocDriveCore
import XCTest

final class ListingMemoryTests: XCTestCase {
    /// Before any listing nothing is known (not even that a path is new); after one, its ids and
    /// paths are, until the next replaces them.
    func testAListingIsKeptUntilTheNext() {
        let m = ListingMemory()
        XCTAssertNil(m.wasNotListed("a"), "no listing yet: not known to be new")
        XCTAssertNil(m.path(ofID: "1"))
        let a: StorePath = "d/a", b: StorePath = "d/b"
        m.listed(ids: ListedIDs(byID: ["1": a]), paths: [a.hashValue, b.hashValue, StorePath("d").hashValue])
        XCTAssertEqual(m.wasNotListed(a), false)
        XCTAssertEqual(m.wasNotListed("d/new"), true)
        XCTAssertEqual(m.path(ofID: "1"), a)
        XCTAssertEqual(m.inFolder("d"), [a])
        m.listed(ids: ListedIDs(byID: ["1": b]), paths: [b.hashValue])
        XCTAssertEqual(m.path(ofID: "1"), b, "moved on another device")
        XCTAssertEqual(m.inFolder("d"), [b])
        XCTAssertEqual(m.wasNotListed(a), true)
        XCTAssertNil(m.broken)
    }

    /// At most `quietPollsInARow` polls in a row end at an unchanged fingerprint; a change of
    /// the fingerprint or of the bases, or a whole poll, ends the row.
    func testQuietPollsEndAfterNineInARow() {
        let m = ListingMemory()
        m.listed(ids: ListedIDs(), paths: [])
        XCTAssertFalse(m.endsQuietly(fingerprint: [1], bases: 7, now: 0), "no poll found nothing yet")
        m.foundNothing(fingerprint: [1], bases: 7)
        XCTAssertFalse(m.endsQuietly(fingerprint: [2], bases: 7, now: 0))
        XCTAssertFalse(m.endsQuietly(fingerprint: [1], bases: 8, now: 0))
        XCTAssertEqual(ListingMemory.quietPollsInARow, 9)
        for k in 0..<9 { XCTAssertTrue(m.endsQuietly(fingerprint: [1], bases: 7, now: 0), "quiet poll \(k + 1)") }
        XCTAssertFalse(m.endsQuietly(fingerprint: [1], bases: 7, now: 0), "the tenth is a whole poll")
        m.forgetQuiet()
        XCTAssertFalse(m.endsQuietly(fingerprint: [1], bases: 7, now: 0))
        XCTAssertNil(m.broken)
    }

    /// Where the last quiet poll set a time for the next whole one (a fingerprint that does not
    /// see every writer), polls end quietly until then however many, and not from then on.
    func testQuietPollsEndAtTheirTimeWhereOneIsSet() {
        let m = ListingMemory()
        m.listed(ids: ListedIDs(), paths: [])
        m.foundNothing(fingerprint: [1], bases: 7, wholeDue: 1000)
        for k in 0..<50 { XCTAssertTrue(m.endsQuietly(fingerprint: [1], bases: 7, now: 900 + Double(k)), "quiet poll \(k + 1)") }
        XCTAssertNil(m.broken)
        XCTAssertFalse(m.endsQuietly(fingerprint: [2], bases: 7, now: 960), "the mark changed")
        XCTAssertFalse(m.endsQuietly(fingerprint: [1], bases: 7, now: 1000), "the whole poll is due")
        m.foundNothing(fingerprint: [1], bases: 7, wholeDue: 2000)
        m.wantWhole()
        XCTAssertFalse(m.endsQuietly(fingerprint: [1], bases: 7, now: 1500), "a whole poll asked for")
        XCTAssertTrue(m.endsQuietly(fingerprint: [1], bases: 7, now: 1500), "asked for once")
        XCTAssertNil(m.broken)
    }

    /// An id at several paths is due to be healed once it stayed at the same paths for the
    /// grace; other paths start the wait again; an id no longer found is forgotten.
    func testDuplicateIDsAreDueAfterTheirGrace() {
        let m = ListingMemory()
        m.listed(ids: ListedIDs(), paths: [])
        func item(_ p: StorePath) -> RemoteItem { RemoteItem(path: p, kind: .file, version: "v", size: 1, meta: RemoteMeta(itemID: "x")) }
        let found = ["x": [item("b"), item("a")]]
        XCTAssertTrue(m.duplicatesDue(found, now: 100, grace: 2).isEmpty)
        XCTAssertTrue(m.duplicatesDue(found, now: 101, grace: 2).isEmpty)
        XCTAssertEqual(m.duplicatesDue(found, now: 102, grace: 2).map(\.0), ["x"])
        XCTAssertTrue(m.duplicatesDue(["x": [item("a"), item("c")]], now: 103, grace: 2).isEmpty, "other paths: waits again")
        XCTAssertEqual(m.duplicatesDue(["x": [item("a"), item("c")]], now: 105, grace: 2).map(\.0), ["x"])
        m.forgetDuplicates(at: ["c"])
        XCTAssertTrue(m.duplicatesDue(["x": [item("a"), item("c")]], now: 106, grace: 2).isEmpty, "healed: seen anew")
        XCTAssertTrue(m.duplicatesDue([:], now: 107, grace: 2).isEmpty)
        XCTAssertTrue(m.duplicatesDue(["x": [item("a"), item("c")]], now: 108, grace: 2).isEmpty, "forgotten when not found")
        XCTAssertNil(m.broken)
    }

    /// The unshown count is logged when it changes only.
    func testTheUnshownCountIsNotedWhenItChanges() {
        let m = ListingMemory()
        XCTAssertFalse(m.noteUnshown(0))
        XCTAssertTrue(m.noteUnshown(2))
        XCTAssertFalse(m.noteUnshown(2))
        XCTAssertTrue(m.noteUnshown(0))
    }

    /// Each rule, broken on purpose, is named by `broken`.
    func testEachBrokenRuleIsNamed() {
        var s = ListingMemory.State()
        XCTAssertNil(s.broken)
        s.quiet = ([1], 1, 0, nil)
        XCTAssertEqual(s.broken, "ListingMemory: a quiet poll before the first listing")
        s.quiet = nil
        s.ids = ListedIDs(byID: ["1": "a"])
        XCTAssertEqual(s.broken, "ListingMemory: ids known before the first listing")
        s.ids = ListedIDs()
        s.duplicates = ["1": (["a", "b"], 0)]
        XCTAssertEqual(s.broken, "ListingMemory: duplicate ids known before the first listing")
        s.duplicates = [:]
        s.unshown = -1
        XCTAssertEqual(s.broken, "ListingMemory: -1 objects unshown")
        s.unshown = 0
        s.paths = [StorePath("a").hashValue]
        s.ids = ListedIDs(byID: [ItemIndex.newID(): "a", "other": "b"])
        XCTAssertEqual(s.broken, "ListingMemory: the listed id at b is not among the listed paths")
        s.paths!.insert(StorePath("b").hashValue)
        XCTAssertNil(s.broken)
        s.quiet = ([1], 1, ListingMemory.quietPollsInARow + 1, nil)
        XCTAssertEqual(s.broken, "ListingMemory: 10 quiet polls in a row, more than 9")
        s.quiet = ([1], 1, ListingMemory.quietPollsInARow + 1, 100)
        XCTAssertNil(s.broken, "a whole poll due by a time, not by a count")
        s.quiet = ([1], 1, ListingMemory.quietPollsInARow, nil)
        XCTAssertNil(s.broken)
        s.duplicates = ["1": (["a"], 0)]
        XCTAssertEqual(s.broken, "ListingMemory: the duplicate id 1 is at 1 path")
        s.duplicates = ["1": (["b", "a"], 0)]
        XCTAssertEqual(s.broken, "ListingMemory: the paths of the duplicate id 1 are not in byte order (b, a)")
        s.duplicates = ["1": (["a", "b"], 0)]
        XCTAssertNil(s.broken)
    }
}

final class ListingMemoryJournalTests: XCTestCase {
    /// On a journal, a poll whose fingerprint changed reads the journal until the whole listing
    /// is due; quiet polls end at the fingerprint whatever the bases; a reading that failed, or
    /// `docdrive sync`, makes the next one a whole listing.
    func testPollsReadTheJournalUntilTheWholeListingIsDue() {
        let m = ListingMemory()
        m.listed(ids: ListedIDs(), paths: [], journal: (JournalCursor(time: 5_000), wholeDue: 1000))
        XCTAssertEqual(m.nextPoll(fingerprint: [1], bases: 7, now: 10), .journal(JournalCursor(time: 5_000)))
        m.foundNothing(fingerprint: [1], bases: 7, wholeDue: m.journalWholeDue)
        XCTAssertEqual(m.nextPoll(fingerprint: [1], bases: 8, now: 20), .quiet, "the bases changed here: still quiet on a journal")
        XCTAssertEqual(m.nextPoll(fingerprint: [2], bases: 8, now: 30), .journal(JournalCursor(time: 5_000)))
        XCTAssertEqual(m.nextPoll(fingerprint: [2], bases: 8, now: 1000), .whole, "the reconcile is due")
        m.journalBroken(cursor: JournalCursor(time: 6_000))
        XCTAssertEqual(m.nextPoll(fingerprint: [1], bases: 7, now: 40), .whole)
        m.listed(ids: ListedIDs(), paths: [], journal: (JournalCursor(time: 7_000), wholeDue: 2000))
        m.wantWhole()
        XCTAssertEqual(m.nextPoll(fingerprint: [3], bases: 7, now: 50), .whole)
        XCTAssertEqual(m.nextPoll(fingerprint: [3], bases: 7, now: 50), .journal(JournalCursor(time: 7_000)))
        m.listed(ids: ListedIDs(), paths: [])
        XCTAssertEqual(m.nextPoll(fingerprint: [3], bases: 7, now: 50), .whole, "no journal")
        XCTAssertNil(m.broken)
    }

    /// What a journal names moves ids and paths over the last listing: a move is found where it
    /// went (the decision of a renamed item asks), a deleted path is gone, a new one listed;
    /// the next whole listing replaces all of it.
    func testTheJournalMovesIdsAndPathsOverTheListing() {
        let m = ListingMemory()
        let a: StorePath = "d/a", b: StorePath = "d/b", c: StorePath = "e/c"
        m.listed(ids: ListedIDs(byID: ["1": a, "2": b]), paths: [a.hashValue, b.hashValue], journal: (JournalCursor(time: 0), 1000))
        m.journaled([JournalChange(.move, c, from: a, id: "1"), JournalChange(.delete, b), JournalChange(.put, "d/new", id: "3")],
                    cursor: JournalCursor(time: 10))
        XCTAssertEqual(m.path(ofID: "1"), c)
        XCTAssertNil(m.path(ofID: "2"), "deleted")
        XCTAssertEqual(m.path(ofID: "3"), "d/new")
        XCTAssertEqual(m.wasNotListed(a), true)
        XCTAssertEqual(m.wasNotListed(c), false)
        XCTAssertEqual(m.inFolder("d"), ["d/new"])
        XCTAssertEqual(m.inFolder("e"), [c])
        XCTAssertEqual(m.nextPoll(fingerprint: [1], bases: 0, now: 1), .journal(JournalCursor(time: 10)), "the cursor advanced")
        XCTAssertNil(m.broken)
        m.listed(ids: ListedIDs(byID: ["2": b]), paths: [b.hashValue], journal: (JournalCursor(time: 20), 1000))
        XCTAssertNil(m.path(ofID: "1"))
        XCTAssertEqual(m.path(ofID: "2"), b)
        XCTAssertNil(m.broken)
    }
}
