// ItemIndexTests: stable ids through creation, renames, removal and reopening.
import DocDriveCore
import Foundation
import GRDB
import Synchronization
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

    func testBasesAreReadOneAtATimeAsAllReadsThem() throws {
        // Given bases of two stores, one of them with 3,000 items (more than one batch)
        let index = try ItemIndex(path: dir + "/bases.sqlite")
        defer { index.stop() }
        let rows = (0..<3000).map { i in
            BaseRow(path: StorePath("d\(i % 7)/f\(i).txt"), id: i % 5 == 0 ? nil : "id-\(i)", kind: i % 11 == 0 ? .folder : .file,
                    localToken: "4096:\(i).0:\(i)", remoteToken: "etag-\(i)")
        }
        try index.bases.putAll(root: "store:a", rows)
        try index.bases.put(root: "store:b", BaseRow(path: "x.txt", id: "other", kind: .file, localToken: "1", remoteToken: "2"))
        // When the first store's bases are read one row at a time
        var seen = [BaseRow]()
        try index.bases.forEach(root: "store:a") { seen.append($0) }
        // Then every base of that store comes once, as written, and none of the other store
        let byPath = Dictionary(uniqueKeysWithValues: seen.map { ($0.path, $0) })
        XCTAssertEqual(seen.count, rows.count)
        XCTAssertEqual(byPath.count, rows.count)
        for r in rows { XCTAssertEqual(byPath[r.path], r) }
        XCTAssertEqual(try index.bases.all(root: "store:a").count, rows.count)
        XCTAssertEqual(try index.bases.all(root: "store:b").map(\.id), ["other"])
    }

    func testTheBasesBelowAFolderAreExactlyThoseWhosePathBeginsWithIt() throws {
        // Given bases whose paths begin alike, some of them not UTF-8, in two stores
        let index = try ItemIndex(path: dir + "/below.sqlite")
        defer { index.stop() }
        let latin1: [UInt8] = [0x63, 0x61, 0x66, 0xE9]  // "café" in Latin-1: not UTF-8
        let paths: [StorePath] = ["a", "a/x", "a/b/y", "a.txt", "a0", "ab/z", "a-/w", "b/a/x", "é/a",
                                  StorePath(bytes: Array("a/".utf8) + latin1), StorePath(bytes: latin1),
                                  StorePath(bytes: latin1 + Array("/in".utf8)), StorePath(bytes: latin1 + [0x30])]
        try index.bases.putAll(root: "store:a", paths.map { BaseRow(path: $0, id: nil, kind: .file, localToken: "1", remoteToken: "1") })
        try index.bases.put(root: "store:b", BaseRow(path: "a/other", id: nil, kind: .file, localToken: "1", remoteToken: "1"))
        // Then the bases below a folder are those whose path begins with its path and a slash
        for folder in [StorePath("a"), StorePath("a/b"), StorePath("b"), StorePath(bytes: latin1), StorePath("é"), StorePath("none")] {
            let want = Set(paths.filter { $0.bytes.starts(with: folder.bytes + [UInt8(ascii: "/")]) })
            XCTAssertEqual(Set(try index.bases.below(root: "store:a", folder: folder).map(\.path)), want, "below \(folder.bytes)")
        }
        // And a folder moved takes exactly those along
        try index.bases.move(root: "store:a", from: "a", to: "m")
        let moved = Set(try index.bases.all(root: "store:a").map(\.path))
        XCTAssertEqual(moved, Set(["m", "m/x", "m/b/y", "a.txt", "a0", "ab/z", "a-/w", "b/a/x", "é/a", StorePath(bytes: Array("m/".utf8) + latin1),
                                   StorePath(bytes: latin1), StorePath(bytes: latin1 + Array("/in".utf8)), StorePath(bytes: latin1 + [0x30])]))
        XCTAssertEqual(try index.bases.all(root: "store:b").map(\.path), ["a/other"])
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
        index.flush()
        XCTAssertEqual(try index.itemCount(), 2)
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
        // (itemCount reads what is written: the writer thread, not the count, writes the batches.)
        while try index.itemCount() < 5000 && Date() < deadline { usleep(10_000) }
        XCTAssertEqual(try index.itemCount(), 5000)
        index.stop()
    }

    func testANameCreatedAgainAfterItsFileWasRenamedAwayKeepsTheId() throws {
        // Given a document with an id, renamed away by an editor (vim: doc -> doc~)
        let index = try ItemIndex(path: dir + "/i.sqlite")
        index.record(.created(root: "r", ino: 10, parentIno: 1, name: "doc", kind: .file))
        let id = try index.itemID(root: "r", ino: 10, parentIno: 1, name: "doc", kind: .file)
        index.record(.renamed(root: "r", ino: 10, parentIno: 1, name: "doc~"))
        // When a new file takes the name back
        index.record(.reclaimed(root: "r", ino: 11, fromIno: 10, parentIno: 1, name: "doc"))
        // Then, before and after the events are written, the new file is the document and the
        // renamed-away file is another item
        for written in [false, true] {
            if written { index.flush() }
            XCTAssertEqual(try index.knownItemID(root: "r", ino: 11), id, "written: \(written)")
            let other = try XCTUnwrap(try index.knownItemID(root: "r", ino: 10), "written: \(written)")
            XCTAssertNotEqual(other, id)
        }
        XCTAssertEqual(try index.item(id: id)?.ino, 11)
        XCTAssertEqual(try index.item(id: id)?.name, "doc")
    }

    /// The answers given from the events not yet written are the answers the database gives
    /// once they are: random sequences of every event, each id asked before and after.
    func testUnwrittenEventsAnswerAsTheDatabaseWill() throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["DOCDRIVE_INDEX_SEED"] ?? "") ?? UInt64.random(in: 0..<1_000_000)
        print("index overlay seed \(seed) (replay with DOCDRIVE_INDEX_SEED=\(seed))")
        var rng = SplitMix64(seed: seed)
        for round in 0..<40 {
            let index = try ItemIndex(path: dir + "/p\(round).sqlite")
            defer { index.stop() }
            let inos: [Int64] = Array(2...7)  // 1 is the root folder
            func pick() -> Int64 { inos[Int(rng.next() % UInt64(inos.count))] }
            // Some of the history already written, the rest still queued.
            for phase in 0..<2 {
                for _ in 0..<Int(rng.next() % 12) {
                    let a = pick(), b = pick()
                    switch rng.next() % 7 {
                    case 0, 1: index.record(.created(root: "r", ino: a, parentIno: 1, name: "n\(a)", kind: .file))
                    case 2: index.record(.renamed(root: "r", ino: a, parentIno: 1, name: "m\(a)"))
                    case 3: index.record(.removed(root: "r", ino: a))
                    case 4: if a != b { index.record(.replaced(root: "r", ino: a, oldIno: b, parentIno: 1, name: "n\(b)")) }
                    case 5: if a != b { index.record(.reclaimed(root: "r", ino: a, fromIno: b, parentIno: 1, name: "n\(b)")) }
                    default: _ = try index.itemID(root: "r", ino: a, parentIno: 1, name: "n\(a)", kind: .file)
                    }
                }
                if phase == 0 { index.flush() }
            }
            let before = try inos.map { try index.knownItemID(root: "r", ino: $0) }
            let pathsBefore = try before.map { try $0.flatMap { try index.knownPath(id: $0, root: "r", rootIno: 1) } }
            index.flush()
            let after = try inos.map { try index.knownItemID(root: "r", ino: $0) }
            let pathsAfter = try after.map { try $0.flatMap { try index.knownPath(id: $0, root: "r", rootIno: 1) } }
            XCTAssertEqual(before, after, "seed \(seed), round \(round)")
            XCTAssertEqual(pathsBefore, pathsAfter, "seed \(seed), round \(round)")
        }
    }

    func testReadsOnMoreThreadsThanReadersSeeTheWriteJustMade() throws {
        // Given 8 threads, twice the index's own read connections (the rest read through the pool)
        let index = try ItemIndex(path: dir + "/readers.sqlite")
        defer { index.stop() }
        let failures = Mutex<[String]>([])
        // When each writes a base and reads it back at once, 300 times, all at the same time
        DispatchQueue.concurrentPerform(iterations: 8) { t in
            for i in 0..<300 {
                let path = StorePath("t\(t)/f\(i % 20)")
                let token = "\(t)-\(i)"
                do {
                    try index.bases.put(root: "store:a", BaseRow(path: path, id: "id-\(t)-\(i % 20)", kind: .file, localToken: token, remoteToken: token))
                    let back = try index.bases.base(root: "store:a", path: path)
                    if back?.localToken != token { failures.withLock { $0.append("\(path): \(back?.localToken ?? "none") for \(token)") } }
                } catch {
                    failures.withLock { $0.append("\(path): \(error)") }
                }
            }
        }
        // Then every read saw the write made just before it (no connection keeps an old snapshot)
        let failed = failures.withLock { $0 }
        XCTAssertEqual(failed.count, 0, "of 2,400 reads, for example: \(failed.prefix(3))")
        XCTAssertEqual(try index.bases.base(root: "store:a", path: "t7/f19")?.localToken, "7-299")
    }

    func testNewIDsAreDistinctVersion4UUIDsInLowerCase() {
        // When 8 threads take 2,000 ids each at the same time
        let ids = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let mine = (0..<2000).map { _ in ItemIndex.newID() }
            ids.withLock { $0 += mine }
        }
        let all = ids.withLock { $0 }
        // Then no two are the same, and each is a random (version 4, RFC 4122 variant) UUID
        XCTAssertEqual(Set(all).count, 16000)
        for id in all.prefix(500) {
            let u = UUID(uuidString: id)
            XCTAssertNotNil(u, id)
            XCTAssertEqual(u?.uuidString.lowercased(), id)
            let bytes = id.utf8.map { $0 }
            XCTAssertEqual(bytes[14], UInt8(ascii: "4"), id)
            XCTAssertTrue("89ab".utf8.contains(bytes[19]), id)
        }
    }
}

final class ReadOnlyIndexTests: XCTestCase {
    func testAReadingOnlyIndexNeitherMigratesNorWrites() throws {
        let dir = NSTemporaryDirectory() + "dd-ro-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/i.sqlite"
        // An index of an older schema: one migration of the daemon's missing.
        do {
            let full = try ItemIndex(path: path)
            try full.uploads.enqueue(root: "store:w", path: "a", due: 0, now: 0)
        }
        let db = try DatabaseQueue(path: path)
        try db.write { try $0.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = (SELECT MAX(identifier) FROM grdb_migrations)") }
        let before = try db.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM grdb_migrations") }
        let ro = try ItemIndex(readingOnly: path)
        XCTAssertEqual(try ro.uploads.counts(), [.pending: 1], "it reads")
        XCTAssertThrowsError(try ro.uploads.enqueue(root: "store:w", path: "b", due: 0, now: 0), "it does not write")
        XCTAssertEqual(try db.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM grdb_migrations") }, before, "it did not migrate")
    }
}
