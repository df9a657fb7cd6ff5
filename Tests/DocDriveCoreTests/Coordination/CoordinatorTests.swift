// CoordinatorTests: intents between the drive's own actors and against other processes' locks.
import CDocDriveSys
import DocDriveCore
import Foundation
import XCTest

final class CoordinatorTests: XCTestCase {
    var path: String!

    override func setUp() {
        path = NSTemporaryDirectory() + "dd-coord-\(UUID().uuidString)"
        FileManager.default.createFile(atPath: path, contents: Data("x".utf8))
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: path)
    }

    func fd(_ flags: Int32 = O_RDWR) -> Int32 { open(path, flags | O_CLOEXEC) }

    func testReadersShareAndAWriterWaitsForThem() throws {
        let c = Coordinator()
        let a = fd(), b = fd(), w = fd()
        defer { close(a); close(b); close(w) }
        try c.coordinate([.init(fd: a, .reading)], timeout: 1) {
            // a second reader gets in at once
            try c.coordinate([.init(fd: b, .reading)], timeout: 0.2) {}
            // a writer cannot, and gives up whole after its time
            XCTAssertThrowsError(try c.coordinate([.init(fd: w, .writing)], timeout: 0.2) {}) { e in
                XCTAssertEqual((e as? DriveError)?.code, .busy)
            }
            // metadata-only never waits
            try c.coordinate([.init(fd: w, .writing)], options: .metadataOnly, timeout: 0) {}
        }
        try c.coordinate([.init(fd: w, .writing)], timeout: 0.2) {}
    }

    func testAnotherOpenFilesWriteLockKeepsAnUploadReaderOut() throws {
        let c = Coordinator()
        let app = fd(), reader = fd(O_RDONLY)
        defer { close(app); close(reader) }
        // an application's lock on the backing file (what the mount holds for a process)
        XCTAssertEqual(dd_ofd_setlk(app, dd_F_WRLCK, 0, 0), 0)
        XCTAssertThrowsError(try c.coordinate([.init(fd: reader, .reading)], options: .forUploading, timeout: 0.2) {})
        let released = expectation(description: "released")
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) {
            _ = dd_ofd_setlk(app, dd_F_UNLCK, 0, 0)
            released.fulfill()
        }
        var ran = false
        try c.coordinate([.init(fd: reader, .reading)], options: .forUploading, timeout: 5) { ran = true }
        XCTAssertTrue(ran)
        wait(for: [released], timeout: 5)
    }

    func testSeveralFilesInOneIntentAndNothingLeftHeldAfterAFailure() throws {
        let other = path + "-2"
        FileManager.default.createFile(atPath: other, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: other) }
        let c = Coordinator()
        let a = fd(), b = open(other, O_RDWR | O_CLOEXEC), blocker = open(other, O_RDWR | O_CLOEXEC)
        defer { close(a); close(b); close(blocker) }
        XCTAssertEqual(dd_ofd_setlk(blocker, dd_F_RDLCK, 0, 0), 0)
        XCTAssertThrowsError(try c.coordinate([.init(fd: b, .writing), .init(fd: a, .writing)], timeout: 0.2) {})
        // the first file was given back: a writer gets it at once
        let a2 = fd()
        defer { close(a2) }
        try c.coordinate([.init(fd: a2, .writing)], timeout: 0.1) {}
        _ = dd_ofd_setlk(blocker, dd_F_UNLCK, 0, 0)
        try c.coordinate([.init(fd: b, .writing), .init(fd: a, .writing)], timeout: 1) {}
    }
}
