// FilledTimesTests: a filled placeholder shows its placeholder's ctime until it changes
// (Sync/FilledTimes.swift), and the table empties (so requests take no lock) once it has.
import DocDriveCore
import Foundation
import XCTest

final class FilledTimesTests: XCTestCase {
    private func file(ino: UInt64, ctime: Int) -> stat {
        var st = stat()
        st.st_mode = S_IFREG | 0o644
        st.st_ino = __ino_t(ino)
        st.st_ctim = timespec(tv_sec: ctime, tv_nsec: 500)
        return st
    }

    /// The ctime (seconds) `t` shows for a file `ino` whose real ctime is `ctime`.
    private func shown(_ t: FilledTimes, ino: UInt64, ctime: Int) -> Int {
        var st = file(ino: ino, ctime: ctime)
        t.apply(&st)
        return st.st_ctim.tv_sec
    }

    func testAFilledFileShowsItsPlaceholdersCtimeUntilItChanges() {
        // Given a placeholder with ctime 100, filled, with ctime 200 after the fill
        let t = FilledTimes()
        t.filling(ino: 7, before: timespec(tv_sec: 100, tv_nsec: 500))
        var during = file(ino: 7, ctime: 150)
        t.apply(&during)
        XCTAssertEqual(during.st_ctim.tv_sec, 100, "while it is being filled it shows the placeholder's ctime")
        t.filled(ino: 7, after: timespec(tv_sec: 200, tv_nsec: 500))

        // When its attributes are given with the ctime the fill left
        var st = file(ino: 7, ctime: 200)
        t.apply(&st)
        // Then they show the placeholder's
        XCTAssertEqual(st.st_ctim.tv_sec, 100)
        XCTAssertEqual(st.st_ctim.tv_nsec, 500)
        XCTAssertEqual(t.count, 1)

        // Another file, in another part or the same, is left alone
        for other: UInt64 in [8, 7 + 64] {
            var o = file(ino: other, ctime: 300)
            t.apply(&o)
            XCTAssertEqual(o.st_ctim.tv_sec, 300, "ino \(other)")
        }
        // So is a folder with the same inode number
        var dir = file(ino: 7, ctime: 200)
        dir.st_mode = S_IFDIR | 0o755
        t.apply(&dir)
        XCTAssertEqual(dir.st_ctim.tv_sec, 200)

        // When the file changes (another ctime), it shows its real ctime from then on, and the
        // table is empty again
        var changed = file(ino: 7, ctime: 250)
        t.apply(&changed)
        XCTAssertEqual(changed.st_ctim.tv_sec, 250)
        XCTAssertEqual(t.count, 0, "the last changed file leaves the table empty")
        var again = file(ino: 7, ctime: 200)
        t.apply(&again)
        XCTAssertEqual(again.st_ctim.tv_sec, 200, "a forgotten file is not brought back")
    }

    func testAFileHeldWhileTheDriveChangesItsCtimeKeepsShowingThePlaceholders() {
        // Given a filled file showing its placeholder's ctime 100 (its real one 200; `file` gives 500 ns)
        let t = FilledTimes()
        t.filling(ino: 5, before: timespec(tv_sec: 100, tv_nsec: 500))
        t.filled(ino: 5, after: timespec(tv_sec: 200, tv_nsec: 500))
        // When the drive holds it (its "filled" mark goes, FillCommits.swift) and gives the new ctime
        XCTAssertTrue(t.hold(ino: 5, real: timespec(tv_sec: 200, tv_nsec: 500)))
        XCTAssertEqual(shown(t, ino: 5, ctime: 250), 100, "between the change and its new ctime")
        t.filled(ino: 5, after: timespec(tv_sec: 300, tv_nsec: 500))
        // Then the new ctime shows the placeholder's, and a later change the real one
        XCTAssertEqual(shown(t, ino: 5, ctime: 300), 100)
        XCTAssertEqual(shown(t, ino: 5, ctime: 400), 400)
        // A file that changed since (or was never filled) is not held
        XCTAssertFalse(t.hold(ino: 5, real: timespec(tv_sec: 400, tv_nsec: 500)))
        XCTAssertFalse(t.hold(ino: 6, real: timespec(tv_sec: 1, tv_nsec: 500)))
        XCTAssertEqual(t.count, 0)
    }

    func testAFailedFillShowsTheRealCtimeAndLeavesTheTableEmpty() {
        let t = FilledTimes()
        t.filling(ino: 9, before: timespec(tv_sec: 100, tv_nsec: 0))
        XCTAssertEqual(t.count, 1)
        t.filled(ino: 9, after: nil)
        XCTAssertEqual(t.count, 0)
        var st = file(ino: 9, ctime: 200)
        t.apply(&st)
        XCTAssertEqual(st.st_ctim.tv_sec, 200)
    }

    func testManyFilesAcrossEveryPartAreKeptAndCounted() {
        let t = FilledTimes()
        for ino in UInt64(1)...1000 { t.filling(ino: ino, before: timespec(tv_sec: Int(ino), tv_nsec: 0)) }
        for ino in UInt64(1)...1000 { t.filled(ino: ino, after: timespec(tv_sec: 5000, tv_nsec: 0)) }
        XCTAssertEqual(t.count, 1000)
        for ino in UInt64(1)...1000 {
            var st = file(ino: ino, ctime: 5000)
            st.st_ctim.tv_nsec = 0
            t.apply(&st)
            XCTAssertEqual(st.st_ctim.tv_sec, Int(ino))
        }
        for ino in UInt64(1)...1000 {
            var st = file(ino: ino, ctime: 6000)
            t.apply(&st)
        }
        XCTAssertEqual(t.count, 0)
    }
}
