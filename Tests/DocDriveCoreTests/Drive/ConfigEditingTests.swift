// ConfigEditingTests: adding and removing apps and stores through the drive home.
import DocDriveCore
import Foundation
import XCTest

final class ConfigEditingTests: XCTestCase {
    var home: DriveHome!

    override func setUpWithError() throws {
        home = DriveHome(path: NSTemporaryDirectory() + "dd-edit-\(UUID().uuidString)")
        try home.initialize(with: DriveConfig())
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: home.path)
    }

    func testAddCreatesFoldersAndRefusesDuplicates() throws {
        try home.addApp(AppConfig(id: "org.n", name: "Notes", isPublic: true))
        XCTAssertTrue(FileManager.default.fileExists(atPath: home.documentsPath("org.n")))
        XCTAssertThrowsError(try home.addApp(AppConfig(id: "org.n", name: "Other", isPublic: false))) { e in
            XCTAssertEqual((e as! DriveError).code, .alreadyExists)
        }
        // A store may not show under a name an app already shows under.
        XCTAssertThrowsError(try home.addStore(StoreConfig(name: "n", displayName: "Notes", remote: .folder(path: home.path + "/r"))))
        XCTAssertEqual(try home.loadConfig().stores, [])
    }

    func testAddStoreCreatesItsRemoteFolderAndRejectsAFile() throws {
        try home.addStore(StoreConfig(name: "w", displayName: "Work", remote: .folder(path: home.remotesPath + "/w")))
        XCTAssertTrue(FileManager.default.fileExists(atPath: home.remotesPath + "/w"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: home.cachePath("w")))
        FileManager.default.createFile(atPath: home.path + "/afile", contents: Data())
        XCTAssertThrowsError(try home.addStore(StoreConfig(name: "x", displayName: "X", remote: .folder(path: home.path + "/afile"))))
        XCTAssertThrowsError(try home.addStore(StoreConfig(name: "Bad Name", displayName: "B", remote: .folder(path: home.path + "/b"))))
        XCTAssertFalse(FileManager.default.fileExists(atPath: home.path + "/b"), "an invalid store creates nothing")
    }

    func testMisplacedRemotesAreRefusedBeforeAnythingIsCreated() throws {
        // Given a store whose remote is beside the drive home
        let outside = home.path + "-remote"
        defer { try? FileManager.default.removeItem(atPath: outside) }
        try home.addStore(StoreConfig(name: "w", displayName: "Work", remote: .folder(path: outside + "/w")))
        // Then another store on the same folder, inside it, inside the drive home or holding it is refused
        for (name, folder) in [("twin", outside + "/w"), ("inner", outside + "/w/inner"), ("inhome", home.path + "/mine"),
                               ("cache", home.cachePath("w") + "/x"), ("outer", (home.path as NSString).deletingLastPathComponent)] {
            XCTAssertThrowsError(try home.addStore(StoreConfig(name: name, displayName: name, remote: .folder(path: folder))), name) { e in
                XCTAssertEqual((e as? DriveError)?.code, .invalidConfig, name)
            }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: outside + "/w/inner"), "a refused store creates nothing")
        XCTAssertFalse(FileManager.default.fileExists(atPath: home.path + "/mine"), "a refused store creates nothing")
        XCTAssertEqual(try home.loadConfig().stores.map(\.name), ["w"])
    }

    func testRemoveKeepsFilesUnlessAsked() throws {
        try home.addApp(AppConfig(id: "org.a", name: "A", isPublic: true))
        try home.addApp(AppConfig(id: "org.b", name: "B", isPublic: true))
        try home.removeApp(id: "org.a", deleteFiles: false)
        XCTAssertTrue(FileManager.default.fileExists(atPath: home.containerPath("org.a")))
        try home.removeApp(id: "org.b", deleteFiles: true)
        XCTAssertFalse(FileManager.default.fileExists(atPath: home.containerPath("org.b")))
        XCTAssertEqual(try home.loadConfig().apps, [])
        XCTAssertThrowsError(try home.removeApp(id: "org.zz", deleteFiles: false)) { e in
            XCTAssertEqual((e as! DriveError).code, .notFound)
        }
    }

    func testConcurrentEditsAreNotLost() throws {
        // Given eight commands adding apps at the same time
        let h = home!
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            try? h.addApp(AppConfig(id: "org.app\(i)", name: "App \(i)", isPublic: true))
        }
        // Then all eight are in the config
        XCTAssertEqual(try home.loadConfig().apps.count, 8)
    }
}
