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
}
