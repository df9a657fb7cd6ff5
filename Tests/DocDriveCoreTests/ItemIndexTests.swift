// ItemIndexTests: stable ids through creation, renames, removal and reopening.
import DocDriveCore
import Foundation
import XCTest

final class ItemIndexTests: XCTestCase {
    var dir: String!

    override func setUp() {
        dir = NSTemporaryDirectory() + "dd-index-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: dir)
    }

    func testIdSurvivesRenameAndReopen() throws {
        // Given an item created through the mount
        var index: ItemIndex? = try ItemIndex(path: dir + "/i.sqlite")
        index!.record(.created(root: "store:w", ino: 42, parentIno: 2, name: "a.txt", kind: .file))
        let id = try index!.itemID(root: "store:w", ino: 42, parentIno: 2, name: "a.txt", kind: .file)
        // When it is renamed and the index is closed and opened again
        index!.record(.renamed(root: "store:w", ino: 42, parentIno: 7, name: "b.txt"))
        index!.stop()
        index = nil
        let reopened = try ItemIndex(path: dir + "/i.sqlite")
        // Then the id is the same and the row follows the new name
        XCTAssertEqual(try reopened.itemID(root: "store:w", ino: 42, parentIno: 7, name: "b.txt", kind: .file), id)
        let rec = try XCTUnwrap(try reopened.item(id: id))
        XCTAssertEqual(rec.name, "b.txt")
        XCTAssertEqual(rec.parentIno, 7)
    }

    func testIdsAreDistinctVersion4UUIDs() throws {
        let index = try ItemIndex(path: dir + "/ids.sqlite")
        defer { index.stop() }
        var seen = Set<String>()
        let pattern = try NSRegularExpression(pattern: "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
        for ino in 1...600 {  // more than one 4 KiB buffer of randomness
            let id = try index.itemID(root: "store:w", ino: Int64(ino), parentIno: 2, name: "f\(ino)", kind: .file)
            XCTAssertEqual(pattern.numberOfMatches(in: id, range: NSRange(id.startIndex..., in: id)), 1, id)
            seen.insert(id)
        }
        XCTAssertEqual(seen.count, 600)
    }

    func testUnknownItemGetsIdOnceAndKeepsIt() throws {
        let index = try ItemIndex(path: dir + "/i.sqlite")
        let a = try index.itemID(root: "app:x:Documents", ino: 5, parentIno: 1, name: "n", kind: .file)
        let b = try index.itemID(root: "app:x:Documents", ino: 5, parentIno: 1, name: "n", kind: .file)
        XCTAssertEqual(a, b)
        // The same inode number in another root is another item.
        let c = try index.itemID(root: "store:w", ino: 5, parentIno: 1, name: "n", kind: .file)
        XCTAssertNotEqual(a, c)
        XCTAssertEqual(try index.counts(), ["app:x:Documents": 1, "store:w": 1])
    }

    func testRemovedItemIsGoneAndANewFileGetsANewId() throws {
        let index = try ItemIndex(path: dir + "/i.sqlite")
        index.record(.created(root: "r", ino: 9, parentIno: 1, name: "old", kind: .file))
        let old = try index.itemID(root: "r", ino: 9, parentIno: 1, name: "old", kind: .file)
        index.record(.removed(root: "r", ino: 9))
        index.flush()
        XCTAssertNil(try index.item(id: old))
        // A reused inode number created through the mount is a new item.
        index.record(.created(root: "r", ino: 9, parentIno: 1, name: "new", kind: .file))
        let new = try index.itemID(root: "r", ino: 9, parentIno: 1, name: "new", kind: .file)
        XCTAssertNotEqual(old, new)
    }

    func testWriterThreadAppliesBatches() throws {
        let index = try ItemIndex(path: dir + "/i.sqlite")
        index.startWriter()
        for i in 0..<5000 {
            index.record(.created(root: "r", ino: Int64(100 + i), parentIno: 1, name: "f\(i)", kind: .file))
        }
        let deadline = Date().addingTimeInterval(10)
        while (try index.counts()["r"] ?? 0) < 5000 && Date() < deadline { usleep(10_000) }
        XCTAssertEqual(try index.counts()["r"], 5000)
        index.stop()
    }
}
