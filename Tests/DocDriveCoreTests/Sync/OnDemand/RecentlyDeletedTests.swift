// RecentlyDeleted: files a delete from the remote takes are moved aside under their day and path,
// and their day folders go once they are keepDays old.
import DocDriveCore
import Foundation
import XCTest

final class RecentlyDeletedTests: XCTestCase {
    private var dir: String!

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "recently-deleted-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir + "/cache/Reports", withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: dir)
    }

    func testAFileIsMovedUnderItsDayAndPathAndASecondOfThatPathTakesANumber() throws {
        let kept = RecentlyDeleted(folder: dir + "/deleted")
        let now = time_t(1_796_428_800)  // 2026-12-05 00:00:00 UTC
        XCTAssertEqual(RecentlyDeleted.day(now), "2026-12-05")
        XCTAssertEqual(RecentlyDeleted.day(now - 1), "2026-12-04")
        let folder = open(dir + "/cache/Reports", O_RDONLY | O_DIRECTORY)
        defer { close(folder) }
        for (i, text) in ["first", "second"].enumerated() {
            try text.write(toFile: dir + "/cache/Reports/q1.txt", atomically: false, encoding: .utf8)
            let at = kept.keep(folder, Array("q1.txt".utf8)[...], as: StorePath("Reports/q1.txt"), now: now)
            XCTAssertEqual(at, i == 0 ? "2026-12-05/Reports/q1.txt" : "2026-12-05/Reports/q1.txt 2")
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/cache/Reports/q1.txt"))
            XCTAssertEqual(try String(contentsOfFile: dir + "/deleted/" + at!, encoding: .utf8), text)
        }
        // Nothing to move: nil, and nothing made in its place.
        XCTAssertNil(kept.keep(folder, Array("gone.txt".utf8)[...], as: StorePath("Reports/gone.txt"), now: now))
        XCTAssertEqual(errno, ENOENT)
    }

    func testASweepRemovesOnlyTheDayFoldersOlderThanTheKeptDays() throws {
        let kept = RecentlyDeleted(folder: dir + "/deleted")
        let now = time_t(1_796_428_800)  // 2026-12-05
        let days = RecentlyDeleted.keepDays
        let old = RecentlyDeleted.day(now - time_t((days + 1) * 86_400))
        let edge = RecentlyDeleted.day(now - time_t(days * 86_400))
        let recent = RecentlyDeleted.day(now - 86_400)
        for name in [old, edge, recent, "notes"] {
            try FileManager.default.createDirectory(atPath: "\(dir!)/deleted/\(name)/a", withIntermediateDirectories: true)
            try "x".write(toFile: "\(dir!)/deleted/\(name)/a/f.txt", atomically: false, encoding: .utf8)
        }
        XCTAssertEqual(kept.sweep(now: now, force: true), 1)
        let left = Set(try FileManager.default.contentsOfDirectory(atPath: dir + "/deleted"))
        XCTAssertEqual(left, [edge, recent, "notes"])
        // At most once an hour unless forced.
        try FileManager.default.createDirectory(atPath: "\(dir!)/deleted/\(old)", withIntermediateDirectories: true)
        XCTAssertEqual(kept.sweep(now: now + 60), 0)
        XCTAssertEqual(kept.sweep(now: now + 3_600), 1)
    }
}
