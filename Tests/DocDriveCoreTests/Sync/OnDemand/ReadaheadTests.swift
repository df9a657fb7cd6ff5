// ReadaheadTests: what an on-demand store downloads ahead while a program opens a folder's
// placeholders one after another (Sync/Readahead.swift), without a mount or a remote.
import DocDriveCore
import XCTest

final class ReadaheadTests: XCTestCase {
    /// The folder "D" with `n` small placeholders, in its listing's order.
    private func folder(_ n: Int, in name: String = "D") -> [Readahead.Candidate] {
        (0..<n).map { Readahead.Candidate(path: StorePath("\(name)/f\($0)"), ino: UInt64(1000 + $0)) }
    }

    func testOneOpenReadsNothingAheadAndTheSecondOpenOfTheFolderStartsAfterIt() {
        let r = Readahead()
        let files = folder(20)
        var scans = 0
        let scan: (StorePath) -> [Readahead.Candidate] = { p in
            scans += 1
            XCTAssertEqual(p, StorePath("D"))
            return files
        }
        XCTAssertEqual(r.openedPlaceholder(files[0].path, now: 0, scan: scan), [])
        XCTAssertEqual(scans, 0, "one open alone never lists the folder")
        XCTAssertFalse(r.active.load(ordering: .relaxed))
        // The second open: the files after it in the listing, as many as the first window.
        let first = r.openedPlaceholder(files[1].path, now: 0.1, scan: scan)
        XCTAssertEqual(scans, 1)
        XCTAssertEqual(first, Array(files[2..<(2 + Readahead.firstWindow)]))
        XCTAssertTrue(r.active.load(ordering: .relaxed))
        // Opening the same file again starts nothing more, and lists nothing again.
        XCTAssertEqual(r.openedPlaceholder(files[1].path, now: 0.2, scan: scan), [])
        XCTAssertEqual(scans, 1)
    }

    func testWhatIsAheadNeverExceedsWhatWasOpenedAndHitsLetMoreGo() {
        let r = Readahead()
        let files = folder(100)
        _ = r.openedPlaceholder(files[0].path, now: 0, scan: { _ in files })
        var ahead = r.openedPlaceholder(files[1].path, now: 0, scan: { _ in files })
        var opened = 2
        var maxAhead = ahead.count
        var inFlight = ahead
        var next = 2
        // The program reads in listing order; each download ahead ends before the next open.
        while next < files.count {
            for c in inFlight { ahead += r.finished(c, failed: false) }
            inFlight = []
            let c = files[next]
            let more = r.openedFile(ino: c.ino, now: Double(next) * 0.01)
            XCTAssertTrue(ahead.contains(c), "f\(next) was downloaded ahead")
            opened += 1
            next += 1
            inFlight += more
            ahead += more
            let notOpened = Set(ahead.map(\.path)).subtracting(files[0..<next].map(\.path))
            maxAhead = max(maxAhead, notOpened.count)
            XCTAssertLessThanOrEqual(notOpened.count, max(Readahead.firstWindow, opened))
            XCTAssertLessThanOrEqual(more.count, Readahead.maxInFlight)
        }
        XCTAssertEqual(Set(ahead.map(\.path)), Set(files[2...].map(\.path)), "every file but the first two came ahead, once")
        XCTAssertEqual(ahead.count, files.count - 2)
        XCTAssertGreaterThan(maxAhead, Readahead.firstWindow, "the window grew with the opens")
    }

    func testAnotherFolderOrAPauseStartsOverAndAFailureStops() {
        let r = Readahead()
        let d = folder(10), e = folder(10, in: "E")
        _ = r.openedPlaceholder(d[0].path, now: 0, scan: { _ in d })
        XCTAssertEqual(r.openedPlaceholder(e[0].path, now: 0.1, scan: { _ in e }), [], "one open of another folder")
        // A pause longer than the sequence allows: the next open of E is a first one again.
        XCTAssertEqual(r.openedPlaceholder(e[1].path, now: 0.1 + Readahead.streakSeconds + 1, scan: { _ in e }), [])
        let started = r.openedPlaceholder(e[2].path, now: Readahead.streakSeconds + 1.2, scan: { _ in e })
        XCTAssertEqual(started.first, e[3])
        // A download ahead fails (offline): nothing more goes, and opens start nothing.
        XCTAssertEqual(r.finished(started[0], failed: true), [])
        XCTAssertFalse(r.active.load(ordering: .relaxed))
        XCTAssertEqual(r.openedPlaceholder(e[7].path, now: Readahead.streakSeconds + 1.3, scan: { _ in e }), [])
        XCTAssertEqual(r.openedFile(ino: started[1].ino, now: Readahead.streakSeconds + 1.4), [])
    }

    /// A folder of `n` (coprime to 7) listed in another order than its names, as ext4 lists:
    /// the listing's i-th file is f(7i mod n).
    private func listedOutOfNameOrder(_ n: Int) -> [Readahead.Candidate] {
        let files = folder(n)
        return (0..<n).map { files[($0 * 7) % n] }
    }

    func testOpensInNameOrderReadAheadInNameOrderAndOpensInListingOrderInListingOrder() {
        let files = listedOutOfNameOrder(50)
        let byName = files.sorted { $0.path < $1.path }
        // A shell glob (`cat D/*`): the opens go by name.
        let r = Readahead()
        _ = r.openedPlaceholder(byName[0].path, now: 0, scan: { _ in files })
        let ahead = r.openedPlaceholder(byName[1].path, now: 0.1, scan: { _ in files })
        XCTAssertEqual(ahead, Array(byName[2..<(2 + Readahead.firstWindow)]), "read ahead in the names' order")
        // `cp -r`: the opens go by the listing.
        let l = Readahead()
        _ = l.openedPlaceholder(files[0].path, now: 0, scan: { _ in files })
        XCTAssertEqual(l.openedPlaceholder(files[1].path, now: 0.1, scan: { _ in files }),
                       Array(files[2..<(2 + Readahead.firstWindow)]), "read ahead in the listing's order")
    }

    func testFilesThatAreHereTellTheOrderButAreNotReadAhead() {
        // Names f0..f9 listed in reverse; the first two were downloaded already (no fetch).
        var files = folder(10).reversed().map { $0 }
        for i in files.indices where files[i].path == StorePath("D/f0") || files[i].path == StorePath("D/f1") { files[i].fetch = false }
        let r = Readahead()
        _ = r.openedPlaceholder(StorePath("D/f1"), now: 0, scan: { _ in files })
        let ahead = r.openedPlaceholder(StorePath("D/f2"), now: 0.1, scan: { _ in files })
        // f1 then f2 is one step in name order and nine in the listing's: name order.
        XCTAssertEqual(ahead.map(\.path), (3..<(3 + Readahead.firstWindow)).map { StorePath("D/f\($0)") })
        XCTAssertFalse(ahead.contains { !$0.fetch })
        // Round the end: after f9 comes f0, which is here already, so f3's run goes on past it.
        XCTAssertEqual(Readahead.inReadingOrder(files, previous: StorePath("D/f8"), current: StorePath("D/f9")).map(\.path),
                       (2...8).map { StorePath("D/f\($0)") })
    }

    func testWithoutAStepToMeasureTheListingsOrderIsKept() {
        // Names f0..f9 listed in reverse: name order would read f6, f7, ... after f5.
        let files = folder(10).reversed().map { $0 }
        let listing = [4, 3, 2, 1, 0, 9, 8, 7, 6].map { StorePath("D/f\($0)") }
        let current = StorePath("D/f5")
        for previous in [nil, current, StorePath("D/gone")] {
            XCTAssertEqual(Readahead.inReadingOrder(files, previous: previous, current: current).map(\.path), listing,
                           "previous \(String(describing: previous))")
        }
        XCTAssertEqual(Readahead.inReadingOrder(files, previous: StorePath("D/f4"), current: current).map(\.path),
                       [6, 7, 8, 9, 0, 1, 2, 3, 4].map { StorePath("D/f\($0)") }, "one step in name order")
    }
}
