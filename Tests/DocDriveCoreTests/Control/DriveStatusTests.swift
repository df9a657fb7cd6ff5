// DriveStatusTests: what `docdrive status` shows when no daemon runs, gathered by the one function
// the daemon uses too (DriveStatus.gather), from the index opened read-only. (Its encoding is in
// ControlProtocolTests; the daemon's answer in Tests/mount/test_upload_status.py.)
import DocDriveCore
import Foundation
import XCTest

final class DriveStatusTests: XCTestCase {
    var dir: String!

    override func setUp() {
        dir = NSTemporaryDirectory() + "dd-status-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: dir)
    }

    func testWithoutADaemonItIsReadFromTheIndexAlone() throws {
        // Given a drive whose index holds two items, a file waiting in "work" (1000 bytes in its
        // local copy), one that failed in "photos", and three files kept after remote deletes
        let home = DriveHome(path: dir)
        let cache = home.cachePath("work")
        try FileManager.default.createDirectory(atPath: cache + "/sub", withIntermediateDirectories: true)
        try Data(count: 1000).write(to: URL(fileURLWithPath: cache + "/sub/a.bin"))
        let kept = home.storePath("photos") + "/deleted/2026-01-02"
        try FileManager.default.createDirectory(atPath: kept, withIntermediateDirectories: true)
        for n in ["x.jpg", "y.jpg", "z.jpg"] { try Data(count: 10).write(to: URL(fileURLWithPath: kept + "/" + n)) }
        do {
            let full = try ItemIndex(path: home.indexPath)
            full.record(.created(root: "store:work", ino: 5, parentIno: 1, name: "sub", kind: .directory))
            full.record(.created(root: "store:work", ino: 6, parentIno: 5, name: "a.bin", kind: .file))
            full.flush()
            try full.uploads.enqueue(root: "store:work", path: "sub/a.bin", due: 0, now: 0)
            try full.uploads.enqueue(root: "store:photos", path: "big.iso", due: 0, now: 0)
            for _ in 0..<full.uploads.failAfter {
                let job = try XCTUnwrap(full.uploads.claim(root: "store:photos", now: 1e12))
                try full.uploads.fail(job, error: "The remote refused it.", now: 0)
            }
            full.stop()
        }
        let stores = [StoreConfig(name: "work", displayName: "Work", remote: .folder(path: dir + "/r1")),
                      StoreConfig(name: "photos", displayName: "Photos", remote: .folder(path: dir + "/r2")),
                      StoreConfig(name: "empty", displayName: "Empty", remote: .folder(path: dir + "/r3"))]

        // When it is gathered as `docdrive status` does with no daemon
        let s = DriveStatus.gather(home: home, stores: stores, index: try ItemIndex(readingOnly: home.indexPath))

        // Then the index's facts are there, per store in the config's order
        XCTAssertEqual(s.items, 2)
        XCTAssertEqual(s.uploads, [.pending: 1, .failed: 1])
        XCTAssertEqual(s.waiting, 2)  // the failed file's back-off has ended: `sync` waits for it too
        XCTAssertEqual(s.stores.map(\.name), ["work", "photos", "empty"])
        XCTAssertEqual(s.stores[0].uploads, [.pending: 1])
        XCTAssertEqual(s.stores[0].bytesLeft, 1000)
        XCTAssertEqual(s.stores[1].failed, [FailedUpload(path: "big.iso", error: "The remote refused it.")])
        XCTAssertEqual(s.stores[1].keptDeleted.files, 3)
        XCTAssertEqual(s.stores[1].keptDeleted.folder, home.storePath("photos") + "/deleted")
        XCTAssertEqual(s.stores[2], StoreStatus(name: "empty", keptDeleted: KeptDeleted(folder: home.storePath("empty") + "/deleted", files: 0, bytes: 0)))
        XCTAssertNotNil(s.device)
        XCTAssertNotNil(s.homeDiskFree)
        // and what only a daemon knows is left unknown.
        XCTAssertNil(s.indexWriteError)
        XCTAssertNil(s.references)
        for st in s.stores {
            XCTAssertNil(st.runningWorkers, st.name)
            XCTAssertNil(st.remote, st.name)
            XCTAssertEqual(st.inFlight, [], st.name)
            XCTAssertFalse(st.held, st.name)
        }
        // With no index yet (a drive never mounted): the stores, with nothing counted.
        let none = DriveStatus.gather(home: home, stores: stores, index: nil)
        XCTAssertEqual(none.items, 0)
        XCTAssertEqual(none.uploads, [:])
        XCTAssertEqual(none.stores.map(\.bytesLeft), [0, 0, 0])
    }
}
