// EngineRemoteTests: a remote's failures reach the sync engine under the engine's codes, with the
// remote's sentence (Sync/Engine/EngineRemote.swift, DriveError.init(_: RemoteError)).
import DocDriveCore
import Foundation
import SystemPackage
import XCTest

final class EngineRemoteTests: XCTestCase {
    var dir: String!
    var remote: EngineRemote!

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "dd-engine-remote-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir + "/remote", withIntermediateDirectories: true)
        let folder = FolderRemote(root: dir + "/remote")
        try folder.writeMarker(store: "work")
        remote = EngineRemote(folder)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: dir)
    }

    func file(_ content: String) -> Int32 {
        let p = dir + "/local-\(UUID().uuidString)"
        FileManager.default.createFile(atPath: p, contents: Data(content.utf8))
        return open(p, O_RDONLY)
    }

    func code(_ body: () throws -> Void) -> DriveError.Code? {
        do { try body() } catch let e as DriveError { return e.code } catch { XCTFail("not the engine's error: \(error)") }
        return nil
    }

    /// A refused condition is the engine's `remoteChanged` (decide again), not a failure.
    func testARefusedConditionIsRemoteChanged() throws {
        // Given a file on the remote
        let fd = file("one")
        defer { close(fd) }
        let first = try remote.upload(from: fd, to: "a.txt", expecting: .absent, meta: RemoteMeta(), limit: nil, progress: nil)
        // When another create, a write over a version that is not there, and a delete of one are tried
        XCTAssertEqual(code { _ = try remote.upload(from: fd, to: "a.txt", expecting: .absent, meta: RemoteMeta(), limit: nil, progress: nil) }, .remoteChanged)
        XCTAssertEqual(code { _ = try remote.upload(from: fd, to: "a.txt", expecting: .version(first.version + "0"), meta: RemoteMeta(), limit: nil, progress: nil) }, .remoteChanged)
        XCTAssertEqual(code { try remote.delete("a.txt", version: first.version + "0") }, .remoteChanged)
        // Then the file is as it was
        XCTAssertEqual(try remote.item(at: "a.txt")?.version, first.version)
    }

    /// Nothing there is `notFound`; a remote that is gone is `unreachable` with its sentence.
    func testMissingAndUnreachable() throws {
        let out = file("")
        defer { close(out) }
        XCTAssertEqual(code { _ = try remote.download("nothing.txt", version: nil, to: out, progress: nil) }, .notFound)
        try FileManager.default.removeItem(atPath: dir + "/remote")
        do {
            try remote.checkReachable()
            XCTFail("a remote folder that is gone answered")
        } catch {
            XCTAssertEqual(error.code, .unreachable)
            XCTAssertTrue(error.message.contains(dir + "/remote"), error.message)
        }
    }

    /// Every remote code has its engine code; a local errno stays the cause (a full disk is told
    /// as it is by a file operation that waited for it).
    func testEveryCodeMapsOnce() {
        let pairs: [(RemoteError.Code, DriveError.Code)] = [
            (.changed, .remoteChanged), (.notFound, .notFound), (.unreachable, .unreachable),
            (.unsupported, .unsupported), (.invalidName, .invalidName), (.invalidConfig, .invalidConfig),
            (.sourceChanged, .changedDuringUpload), (.io, .io),
        ]
        for (from, to) in pairs {
            let e = DriveError(RemoteError(from, "the sentence"))
            XCTAssertEqual(e.code, to, "\(from)")
            XCTAssertEqual(e.message, "the sentence")
        }
        XCTAssertEqual(DriveError(RemoteError.io("cannot write the download", .noSpace)).noRoomErrno, .noSpace)
        XCTAssertNil(DriveError(RemoteError(.io, "the server answered 500")).noRoomErrno)
    }
}
