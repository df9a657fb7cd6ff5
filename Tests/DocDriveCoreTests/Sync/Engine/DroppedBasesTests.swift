// DroppedBasesTests: the files whose base was dropped as gone from the remote (Sync/Engine/DroppedBases.swift).
import DocDriveCore
import XCTest

final class DroppedBasesTests: XCTestCase {
    /// A dropped base's version is found at its path; a folder's (empty) version is not kept.
    func testADroppedFileKeepsItsVersion() {
        let d = DroppedBases()
        d.note("a.txt", version: "3 17 99")
        d.note("folder", version: "")
        XCTAssertEqual(d.version(at: "a.txt"), "3 17 99")
        XCTAssertNil(d.version(at: "folder"))
        d.note("a.txt", version: "4 18 99")
        XCTAssertEqual(d.version(at: "a.txt"), "4 18 99", "the last drop of a path wins")
        XCTAssertEqual(d.count, 1)
        XCTAssertNil(d.broken)
    }

    /// The table holds at most 10,000 files: the next empties it first.
    func testTheTableIsEmptiedAtItsLimit() {
        let d = DroppedBases()
        XCTAssertEqual(DroppedBases.limit, 10_000)
        for k in 0..<DroppedBases.limit { d.note(StorePath("f\(k)"), version: "v\(k)") }
        XCTAssertEqual(d.count, 10_000)
        XCTAssertEqual(d.version(at: "f0"), "v0")
        d.note("one-more", version: "v")
        XCTAssertEqual(d.count, 1)
        XCTAssertNil(d.version(at: "f0"))
        XCTAssertEqual(d.version(at: "one-more"), "v")
        XCTAssertNil(d.broken)
    }

    /// Each rule, broken on purpose, is named by `broken`.
    func testEachBrokenRuleIsNamed() {
        var s = DroppedBases.State()
        for k in 0...DroppedBases.limit { s.versions[StorePath("f\(k)")] = "v" }
        XCTAssertEqual(s.broken, "DroppedBases: 10001 files kept, more than 10000")
        s.versions = ["a": "v", "b": ""]
        XCTAssertEqual(s.broken, "DroppedBases: b is kept with an empty version")
        s.versions["b"] = "w"
        XCTAssertNil(s.broken)
    }
}
