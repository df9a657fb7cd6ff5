// ChangeFeedTests: every mutating operation publishes exactly one change, with what it changed.
import DocDriveCore
import Foundation
import Logging
import Synchronization
import XCTest

/// Writes down each change as one line: the case and the names it carries.
final class ChangeRecorder: DriveChangeSubscriber {
    let lines = Mutex<[String]>([])

    func changed(_ change: DriveChange) {
        guard case let .mount(change, _) = change else { return }
        let line: String
        switch change {
        case let .created(_, name, _, kind, reclaiming):
            line = "created \(String(cString: name)) \(kind.rawValue)\(reclaiming != nil ? " reclaiming" : "")"
        case let .linked(_, name): line = "linked \(String(cString: name))"
        case let .removed(_, name, _): line = "removed \(String(cString: name))"
        case let .renamed(_, name, _, newName, _, dst, exchange):
            line = "renamed \(String(cString: name)) \(String(cString: newName))\(dst != nil ? " over" : "")\(exchange ? " exchange" : "")"
        case .truncated: line = "truncated"
        case .saved: line = "saved"
        case let .savedThroughReference(_, _, _, path, _, _, _, _): line = "saved-through-reference \(path)"
        }
        lines.withLock { $0.append(line) }
    }

    func take() -> [String] { lines.withLock { l in defer { l.removeAll() }; return l } }
}

/// Counts the changes it is called for, following only saves (as the file system's pictures do).
final class SaveCounter: DriveChangeSubscriber {
    let calls = Atomic<Int>(0)
    var follows: DriveChangeKinds { .saves }
    func changed(_ change: DriveChange) { calls.add(1, ordering: .relaxed) }
}

final class ChangeFeedTests: XCTestCase {
    var home: DriveHome!
    var drive: Drive!
    var fs: DriveFileSystem!
    let recorder = ChangeRecorder()
    let me = Caller(uid: getuid(), gid: getgid(), pid: getpid())

    override func setUpWithError() throws {
        home = DriveHome(path: NSTemporaryDirectory() + "dd-feed-\(UUID().uuidString)")
        let config = DriveConfig(apps: [AppConfig(id: "org.n", name: "Notes", isPublic: true)], stores: [])
        try home.initialize(with: config)
        drive = Drive(home: home, config: config, index: try ItemIndex(path: home.indexPath),
                      logger: Logger(label: "test"), subscribers: [recorder])
        fs = drive.fs
    }

    override func tearDown() {
        fs.shutdown()
        try? FileManager.default.removeItem(atPath: home.path)
    }

    func node(_ parent: UInt64, _ name: String) throws -> UInt64 {
        try name.withCString { (c) throws in try fs.lookup(parent: parent, name: c) }.inode.nodeID
    }

    func testEachOperationPublishesOneChange() throws {
        let notes = try node(DriveFileSystem.rootID, "Notes")
        let (e, f) = try "a.txt".withCString { (c) throws in try fs.create(parent: notes, name: c, mode: 0o644, flags: O_RDWR, caller: me) }
        XCTAssertEqual(recorder.take(), ["created a.txt file"])
        let data = Array("hello".utf8)
        _ = try fs.write(f, data, count: data.count, offset: 0)
        try fs.flush(f)
        try fs.fsync(f, dataOnly: false)  // nothing written since the flush: no second save
        fs.release(f)
        XCTAssertEqual(recorder.take(), ["saved"])

        _ = try "d".withCString { (c) throws in try fs.mkdir(parent: notes, name: c, mode: 0o755, caller: me) }
        _ = try "l".withCString { (c) throws in try "a.txt".withCString { (t) throws in try fs.symlink(target: t, parent: notes, name: c, caller: me) } }
        _ = try "h".withCString { (c) throws in try fs.link(e.inode.nodeID, newParent: notes, newName: c) }
        XCTAssertEqual(recorder.take(), ["created d directory", "created l symlink", "linked h"])

        try "a.txt".withCString { a throws in try "b.txt".withCString { b throws in
            try fs.rename(parent: notes, name: a, newParent: notes, newName: b, flags: 0)
        } }
        try "h".withCString { a throws in try "b.txt".withCString { b throws in
            // Two names of one file: rename(2) does nothing, and nothing is published twice.
            try fs.rename(parent: notes, name: a, newParent: notes, newName: b, flags: 0)
        } }
        XCTAssertEqual(recorder.take(), ["renamed a.txt b.txt", "renamed h b.txt over"])

        var shorter = AttributeChanges()
        shorter.size = 2
        _ = try fs.setattr(e.inode.nodeID, shorter, file: nil)
        XCTAssertEqual(recorder.take(), ["truncated"])

        try "b.txt".withCString { (c) throws in try fs.unlink(parent: notes, name: c) }
        try "d".withCString { (c) throws in try fs.rmdir(parent: notes, name: c) }
        XCTAssertEqual(recorder.take(), ["removed b.txt", "removed d"])

        // A failed operation publishes nothing.
        XCTAssertThrowsError(try "gone".withCString { (c) throws in try fs.unlink(parent: notes, name: c) })
        XCTAssertThrowsError(try "l".withCString { (c) throws in try fs.rmdir(parent: notes, name: c) })
        XCTAssertEqual(recorder.take(), [])
    }

    /// A subscriber is called only for the kinds it follows (checked before a weakly held one is
    /// loaded): here, of a create, a write, a save, a rename and an unlink, only the save.
    func testASubscriberIsCalledOnlyForTheKindsItFollows() throws {
        let saves = SaveCounter()
        drive.changes.subscribeWeakly(saves)
        let notes = try node(DriveFileSystem.rootID, "Notes")
        let (_, f) = try "k.txt".withCString { (c) throws in try fs.create(parent: notes, name: c, mode: 0o644, flags: O_RDWR, caller: me) }
        let data = Array("hello".utf8)
        _ = try fs.write(f, data, count: data.count, offset: 0)
        fs.release(f)
        try "k.txt".withCString { a throws in try "m.txt".withCString { b throws in
            try fs.rename(parent: notes, name: a, newParent: notes, newName: b, flags: 0)
        } }
        try "m.txt".withCString { (c) throws in try fs.unlink(parent: notes, name: c) }
        XCTAssertEqual(recorder.take(), ["created k.txt file", "saved", "renamed k.txt m.txt", "removed m.txt"])
        XCTAssertEqual(saves.calls.load(ordering: .relaxed), 1)
    }
}
