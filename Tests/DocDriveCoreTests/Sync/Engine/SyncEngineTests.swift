// SyncEngineTests: two devices (drive homes with their own index and uploader, no mount) on one
// remote, a folder and, when `Tests/s3/weed.py run` started one, an S3 bucket: what each does
// to its local copy, how they agree, and that one item keeps one id on every device.
import CDocDriveSys
import DocDriveCore
import Foundation
import Logging
import Synchronization
import XCTest

final class PathSet: Sendable {
    let paths = Mutex<Set<String>>([])
}

/// Actions by store path, each run once.
final class PathActions: Sendable {
    let actions = Mutex<[String: @Sendable () -> Void]>([:])
}

/// An action run once, by whichever thread comes first.
final class OneAction: Sendable {
    let action = Mutex<(@Sendable () -> Void)?>(nil)

    func runOnce() {
        action.withLock { f -> (@Sendable () -> Void)? in
            defer { f = nil }
            return f
        }?()
    }
}

/// What a worker runs before it makes the paths it uploaded durable and records them.
final class CommitWatch: Sendable {
    let action = Mutex<(@Sendable ([String]) -> Void)?>(nil)
}

/// One device: a drive home with the store "shared" on `remote`, its index and its uploader
/// (write-back 50 ms; it looks at the remote when asked, `settle`, not by itself).
final class SyncDevice: @unchecked Sendable {
    let home: DriveHome
    let index: ItemIndex
    let uploader: SyncService
    let rootKey: String
    /// Paths the test holds "open for writing" (the mount would say so).
    let openForWriting = PathSet()
    /// Paths whose file a process opens for writing right after the sync's plain checks: an
    /// `isOpenForWriting` does not see it yet, but the check the open is ordered with
    /// (`unlessOpenForWriting`, under the mount's open-files lock) does.
    let openedInTheWindow = PathSet()
    /// What happens (once) right before this device's first decision of a path: another
    /// device's change at that moment.
    let beforeDeciding = PathActions()
    /// Paths whose next upload this device stops after (as a crash would): the remote holds
    /// it, the base does not say so. `stoppedAfterUpload`: those it stopped after.
    let stopAfterUpload = PathSet()
    let stoppedAfterUpload = PathSet()
    /// What happens (once) right after this device's upload of a path reached the remote,
    /// before anything else: another device's write at that moment.
    let afterUpload = PathActions()
    /// What the uploader's committing thread runs (once) after it took noted paths and before
    /// it writes them into the queue.
    let beforeQueueing = OneAction()
    /// Runs each time a worker is about to make the paths it uploaded durable, then record them.
    let beforeCommit = CommitWatch()

    /// `restarting`: the drive home `name` is there already (a device started again).
    /// `content`: the store's content mode (on demand, what is new on the remote is placed as
    /// placeholders).
    init(_ base: String, name: String, remote: RemoteConfig, restarting: Bool = false, content: StoreConfig.ContentMode = .allLocal) throws {
        home = DriveHome(path: base + "/" + name)
        var store = StoreConfig(name: "shared", displayName: "Shared", remote: remote, writebackDelay: 0.05, poll: 3600)
        store.content = content
        rootKey = store.rootKey
        let config = DriveConfig(stores: [store])
        if !restarting {
            try home.initialize(with: config)
            try home.saveDevice(DeviceIdentity.make(name: name))
            try FileManager.default.createDirectory(atPath: home.cachePath("shared"), withIntermediateDirectories: true)
        }
        index = try ItemIndex(path: home.indexPath)
        index.startWriter()
        var logger = Logger(label: "sync-\(name)")
        if ProcessInfo.processInfo.environment["DOCDRIVE_LOG_LEVEL"] == "debug" { logger.logLevel = .debug }
        var probe = SyncProbe()
        probe.willDecide = { [beforeDeciding] path in beforeDeciding.actions.withLock { $0.removeValue(forKey: path) }?() }
        probe.uploaded = { [stopAfterUpload, stoppedAfterUpload, afterUpload] path throws(DriveError) in
            afterUpload.actions.withLock { $0.removeValue(forKey: path) }?()
            guard stopAfterUpload.paths.withLock({ $0.remove(path) }) != nil else { return }
            stoppedAfterUpload.paths.withLock { _ = $0.insert(path) }
            throw DriveError(.io, "the test stops the device after the upload of \(path)")
        }
        probe.willQueueNoted = { [beforeQueueing] in beforeQueueing.runOnce() }
        probe.willCommitUploads = { [beforeCommit] paths in beforeCommit.action.withLock { $0 }?(paths) }
        let changes = DriveChanges(index: index)
        uploader = SyncService(home: home, config: config, index: index, logger: logger, configWatch: ConfigWatch(home: home, changes: changes),
                            localFiles: TestOpenFiles(cache: home.cachePath("shared"), openForWriting: openForWriting,
                                                      openedInTheWindow: openedInTheWindow),
                            changes: changes, probe: probe)
        uploader.start()
    }

    func stop() {
        _ = uploader.stop(drainFor: 0)
        index.stop()
    }

    var cache: String { home.cachePath("shared") }

    /// Saves `text` as `path` in place (as a program writing through the mount does: the same
    /// file, truncated and written; then the mount's note for the uploader).
    func write(_ path: String, _ text: String) {
        let full = cache + "/" + path
        try? FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let fd = open(full, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let bytes = Array(text.utf8)
        XCTAssertEqual(Foundation.write(fd, bytes, bytes.count), bytes.count)
        close(fd)
        uploader.scheduler.noteChanged(root: rootKey, path: path)
    }

    /// Renames `from` to `to` (as the mount does: the index follows the item; `noted`: the
    /// paths the uploader hears of now).
    func rename(_ from: String, _ to: String, noted: [String]? = nil) {
        XCTAssertEqual(Foundation.rename(cache + "/" + from, cache + "/" + to), 0)
        var st = stat(), pst = stat()
        XCTAssertEqual(lstat(cache + "/" + to, &st), 0)
        XCTAssertEqual(lstat(((cache + "/" + to) as NSString).deletingLastPathComponent, &pst), 0)
        index.record(.renamed(root: rootKey, ino: Int64(st.st_ino), parentIno: Int64(pst.st_ino), name: (to as NSString).lastPathComponent))
        for p in noted ?? [from, to] { note(p) }
    }

    /// Makes the folder `path` (as the mount does: then the note for the uploader).
    func mkdir(_ path: String) {
        XCTAssertEqual(Foundation.mkdir(cache + "/" + path, 0o755), 0)
        note(path)
    }

    func note(_ path: String) {
        uploader.scheduler.noteChanged(root: rootKey, path: path)
    }

    /// Deletes `path` (as the mount does: its item is gone from the index).
    func remove(_ path: String) {
        var st = stat()
        if lstat(cache + "/" + path, &st) == 0 { index.record(.removed(root: rootKey, ino: Int64(st.st_ino))) }
        unlink(cache + "/" + path)
        uploader.scheduler.noteChanged(root: rootKey, path: path)
    }

    func read(_ path: String) -> String? {
        FileManager.default.contents(atPath: cache + "/" + path).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The item id of the local file `path`.
    func id(_ path: String) throws -> String? {
        var st = stat()
        guard lstat(cache + "/" + path, &st) == 0 else { return nil }
        return try index.knownItemID(root: rootKey, ino: Int64(st.st_ino))
    }

    /// Files of the local copy, with their content.
    func tree() -> [String: String] {
        var out = [String: String]()
        let e = FileManager.default.enumerator(atPath: cache)
        while let p = e?.nextObject() as? String {
            var isDir: ObjCBool = false
            if FileManager.default.fileExists(atPath: cache + "/" + p, isDirectory: &isDir), !isDir.boolValue { out[p] = read(p) }
        }
        return out
    }

    /// Looks at the remote now and waits until everything queued is done.
    func settle(timeout: Double = 20) {
        let marks = uploader.pollNow()
        let deadline = Date().addingTimeInterval(timeout)
        while !uploader.polledSince(marks) && Date() < deadline { usleep(20_000) }
        drain(timeout: deadline.timeIntervalSinceNow)
    }

    /// Waits until everything queued is done (without a look at the remote of its own).
    func drain(timeout: Double = 20) {
        let deadline = Date().addingTimeInterval(timeout)
        usleep(200_000)  // the notes of the last saves reach the queue
        while uploader.storeState(root: rootKey) != .synced && Date() < deadline { usleep(20_000) }
    }
}

final class SyncEngineTests: XCTestCase {
    static let env = ProcessInfo.processInfo.environment
    var base = ""
    var devices = [SyncDevice]()

    override func setUpWithError() throws {
        base = NSTemporaryDirectory() + "dd-sync-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
    }

    override func tearDown() {
        for d in devices { d.stop() }
        devices = []
        try? FileManager.default.removeItem(atPath: base)
    }

    /// The remotes to run a scenario on: a folder, and S3 where a server was started for the
    /// tests (in CI a missing one fails, as in S3RemoteTests).
    func remotes() throws -> [(String, RemoteConfig)] {
        let folder = base + "/remote-\(UUID().uuidString.prefix(6))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try FolderRemote(root: folder).writeMarker(store: "shared")
        var out: [(String, RemoteConfig)] = [("folder", .folder(path: folder))]
        if let endpoint = Self.env["DOCDRIVE_S3_ENDPOINT"], !endpoint.isEmpty {
            let settings = S3Settings(endpoint: endpoint, bucket: Self.env["DOCDRIVE_S3_BUCKET"] ?? "docdrive-test",
                                      prefix: "sync-\(UUID().uuidString.prefix(8))", pathStyle: true)
            try S3Remote(settings: settings, device: "test").writeMarker(store: "shared")
            out.append(("s3", .s3(settings)))
        } else if Self.env["CI"] == "true" {
            XCTFail("DOCDRIVE_S3_ENDPOINT is not set: run the tests under `python3 Tests/s3/weed.py run --`")
        }
        return out
    }

    /// Two fresh devices on `remote`, both holding `files` (written on the first).
    func two(_ remote: RemoteConfig, _ kind: String, files: [String: String]) throws -> (SyncDevice, SyncDevice) {
        let a = try SyncDevice(base, name: "alpha-\(kind)", remote: remote)
        let b = try SyncDevice(base, name: "beta-\(kind)", remote: remote)
        devices += [a, b]
        for (p, t) in files { a.write(p, t) }
        a.settle()
        b.settle()
        for (p, t) in files { XCTAssertEqual(b.read(p), t, "\(kind): \(p) reached the second device") }
        return (a, b)
    }

    func settleAll(_ devs: SyncDevice...) {
        for _ in 0..<2 { for d in devs { d.settle() } }
    }

    func testStatusTellsApartTwoDevicesOfOneName() {
        let metas = [RemoteMeta(deviceID: "0fced1d3e4ee", deviceName: "vm"), RemoteMeta(deviceID: "a1b2c3d4e5f6", deviceName: "vm"),
                     RemoteMeta(deviceID: "0fced1d3e4ee", deviceName: "vm"), RemoteMeta(deviceID: "77", deviceName: "laptop"),
                     RemoteMeta(), RemoteMeta(deviceID: "77", deviceName: "laptop")]
        XCTAssertEqual(RemoteState.deviceNames(metas), ["laptop", "vm (0fced1d3)", "vm (a1b2c3d4)"])
    }

    func testAnUnmountWaitsForTheLastSaveTheCommitterHadTaken() throws {
        let folder = base + "/remote"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try FolderRemote(root: folder).writeMarker(store: "shared")
        let a = try SyncDevice(base, name: "alpha", remote: .folder(path: folder))
        defer { a.index.stop() }
        a.settle()
        // Given the last save before an unmount, taken by the committing thread, which is
        // held before it writes it into the queue
        let taken = DispatchSemaphore(value: 0), go = DispatchSemaphore(value: 0)
        a.beforeQueueing.action.withLock { $0 = { taken.signal(); _ = go.wait(timeout: .now() + 10) } }
        a.write("last.txt", "the last save")
        XCTAssertEqual(taken.wait(timeout: .now() + 10), .success, "the committing thread never took the save")
        // When the unmount begins meanwhile, and the commit goes on a moment later
        let left = Mutex<Int?>(nil)
        let stopped = DispatchSemaphore(value: 0)
        Thread { [uploader = a.uploader] in
            let n = uploader.stop(drainFor: 10)
            left.withLock { $0 = n }
            stopped.signal()
        }.start()
        usleep(300_000)
        go.signal()
        XCTAssertEqual(stopped.wait(timeout: .now() + 30), .success, "the unmount's drain did not end")
        // Then the unmount uploaded it before it ended
        XCTAssertEqual(FileManager.default.contents(atPath: folder + "/last.txt").map { String(decoding: $0, as: UTF8.self) },
                       "the last save", "the unmount ended without uploading the save the committer had taken")
        XCTAssertEqual(left.withLock { $0 }, 0)
    }

    func testASaveAnotherDevicesSaveOfTheSameMomentReplacedUnseenIsKept() throws {
        // S3 only: a folder remote's writes are made under its lock. On SeaweedFS a multipart
        // upload's completion and a PutObject, both `If-Match` the same version, both succeeded
        // in 25 of 100 tries (2026-11-27): the one that landed last replaced the other unseen.
        for (kind, remote) in try remotes() {
            guard case .s3(let settings) = remote else { continue }
            // Given a file on two devices
            let (a, _) = try two(remote, kind, files: ["f.txt": "v1"])
            let s3 = try S3Remote(settings: settings, device: "test")
            let v1 = try XCTUnwrap(try s3.item(at: "f.txt"))
            // When this device saves it, written over v1,
            a.write("f.txt", "v2 from alpha")
            a.settle()
            let v2 = try XCTUnwrap(try s3.item(at: "f.txt"))
            XCTAssertEqual(v2.meta.parent, v1.version, "an S3 write names the version it was written over")
            // and another device's save of the same moment, written over v1 too, lands after it
            // (what the race leaves: its write, as that device sends it, made here with curl)
            let theirs = base + "/theirs.txt"
            try Data("v2 from gamma".utf8).write(to: URL(fileURLWithPath: theirs))
            let url = settings.endpoint + "/" + settings.bucket + "/" + s3.keys.keyPrefix + "f.txt"
            _ = try S3RemoteTests.curl(["-sS", "-f", "-T", theirs, "-H", "x-amz-meta-docdrive-id: \(try XCTUnwrap(v2.meta.itemID))",
                                        "-H", "x-amz-meta-docdrive-device-name: gamma", "-H", "x-amz-meta-docdrive-parent: \(v1.version)", url])
            a.settle()
            // Then neither version is lost: this device's stays the file and goes up again, the
            // other is kept as a conflict copy, on the remote too
            try assertBothKept(a, s3, kind, "f.txt", mine: "v2 from alpha", gammas: "v2 from gamma")
        }
    }

    /// `a` holds `mine` at `path` and gamma's version `gammas` as a conflict copy beside it; both
    /// reach the remote (mine over gamma's).
    func assertBothKept(_ a: SyncDevice, _ s3: S3Remote, _ kind: String, _ path: String, mine: String, gammas: String) throws {
        let tree = a.tree()
        XCTAssertEqual(tree[path], mine, "\(kind): \(tree)")
        let stem = (path as NSString).deletingPathExtension
        let copies = tree.filter { $0.key.hasPrefix(stem + " (conflict from gamma ") }
        XCTAssertEqual(Array(copies.values), [gammas], "\(kind): \(tree)")
        a.settle()
        let now = try XCTUnwrap(try s3.item(at: StorePath(path)))
        XCTAssertEqual(now.size, Int64(mine.utf8.count), "\(kind): this device's version went up again")
        XCTAssertNotNil(try s3.item(at: StorePath(try XCTUnwrap(copies.keys.first))), "\(kind): the conflict copy is on the remote")
    }

    /// Writes `text` at `path` of the S3 store `settings` as another device's DocDrive would
    /// (its id, name and parent), with curl. (Not the device's id too: curl 7.88 signs
    /// `x-amz-meta-docdrive-device` and `-device-name` in the wrong order, and the server refuses it.)
    static func putAsGamma(_ settings: S3Settings, _ s3: S3Remote, _ path: String, _ text: String, parent: String, in base: String) throws {
        let theirs = base + "/theirs-\(UUID().uuidString.prefix(6)).txt"
        try Data(text.utf8).write(to: URL(fileURLWithPath: theirs))
        let url = settings.endpoint + "/" + settings.bucket + "/" + s3.keys.keyPrefix + path
        _ = try S3RemoteTests.curl(["-sS", "-f", "-T", theirs, "-H", "x-amz-meta-docdrive-id: \(ItemIndex.newID())",
                                    "-H", "x-amz-meta-docdrive-device-name: gamma",
                                    "-H", "x-amz-meta-docdrive-parent: \(parent)", url])
    }

    func testANewFileAnotherDevicesCreateOfTheSameMomentReplacedUnseenIsKept() throws {
        // S3 only. The race of the test above with two creates (each `If-None-Match: *`): the
        // one that landed last replaced the other before any listing showed it.
        for (kind, remote) in try remotes() {
            guard case .s3(let settings) = remote else { continue }
            // Given a store on two devices
            let (a, _) = try two(remote, kind, files: ["f.txt": "v1"])
            let s3 = try S3Remote(settings: settings, device: "test")
            // When this device makes a new file, which goes up as a create, and another
            // device's create of the same name lands right after it (what the race leaves)
            let raced = PathSet()  // the parent of this device's upload, seen before the other lands
            a.afterUpload.actions.withLock { [base] in
                $0["n.txt"] = {
                    raced.paths.withLock { _ = $0.insert(((try? s3.item(at: "n.txt")) ?? nil)?.meta.parent ?? "-") }
                    try? Self.putAsGamma(settings, s3, "n.txt", "new from gamma", parent: RemoteMeta.created, in: base)
                }
            }
            a.write("n.txt", "new from alpha")
            settleAll(a)
            XCTAssertEqual(raced.paths.withLock { $0 }, [RemoteMeta.created], "\(kind): this device's upload was a create")
            // Then neither file is lost: this device's stays the file and goes up again, the
            // other is kept as a conflict copy, on the remote too
            try assertBothKept(a, s3, kind, "n.txt", mine: "new from alpha", gammas: "new from gamma")
        }
    }

    func testANewFileDeletedAndMadeAgainByAnotherDeviceOnceListedIsDownloaded() throws {
        for (kind, remote) in try remotes() {
            guard case .s3(let settings) = remote else { continue }
            // Given a new file of this device's, uploaded and then listed
            let (a, _) = try two(remote, kind, files: ["f.txt": "v1"])
            let s3 = try S3Remote(settings: settings, device: "test")
            a.write("n.txt", "new from alpha")
            settleAll(a)
            // When another device, which saw it, deletes it and makes a new file of that name
            try s3.delete("n.txt", version: try XCTUnwrap(try s3.item(at: "n.txt")).version)
            try Self.putAsGamma(settings, s3, "n.txt", "new from gamma", parent: RemoteMeta.created, in: base)
            a.settle()
            // Then the new file replaces it here, with no conflict copy
            XCTAssertEqual(a.tree(), ["f.txt": "v1", "n.txt": "new from gamma"], kind)
        }
    }

    func testAFileMadeInAFolderJustBeforeTheFolderWasRenamedGoesUp() throws {
        // (Found by hand: rsync wrote new.h into a folder, `mv` renamed the folder a moment
        // later; the folder moved on the remote, new.h never went up, and showed as synced.)
        for (kind, remote) in try remotes() {
            // Given a folder on two devices
            let (a, b) = try two(remote, kind, files: ["d/old.txt": "old", "d/sub/deep.txt": "deep"])
            // When a file is made in it and in its subfolder, and the folder is renamed before
            // their syncs ran (so they ran under the old names, and found nothing there)
            for p in ["d/new.txt", "d/sub/new.txt"] {
                XCTAssertTrue(FileManager.default.createFile(atPath: a.cache + "/" + p, contents: Data("new \(p)".utf8)))
                a.note(p)
            }
            a.rename("d", "e", noted: [])
            a.drain()
            a.note("d")
            a.note("e")
            settleAll(a, b)
            // Then they went up with the folder's new name, and reached the other device
            let want = ["e/old.txt": "old", "e/sub/deep.txt": "deep", "e/new.txt": "new d/new.txt", "e/sub/new.txt": "new d/sub/new.txt"]
            XCTAssertEqual(a.tree(), want, kind)
            XCTAssertEqual(b.tree(), want, kind)
        }
    }

    func testARenamedFolderWhoseOldPathIsDecidedBeforeItsFilesMovedDoesNotComeBack() throws {
        // (Found in CI: the old folder's delete ran while a file in it still waited for its new
        // path's sync to move it; the remote refused to delete a folder that was not empty,
        // which was taken for a file added there, and the folder came back on both sides.)
        for (kind, remote) in try remotes() {
            // Given a folder with a file and a subfolder, on two devices
            let (a, b) = try two(remote, kind, files: ["d/one.txt": "1", "d/inner/two.txt": "2"])
            // When it is renamed, and the subfolder's new path is decided first (it moves on
            // the remote by itself), then the folder's old path, before the file's new one
            a.rename("d", "e", noted: [])
            a.note("e/inner")
            a.drain()
            a.note("d")
            a.drain()
            a.note("e")
            settleAll(a, b)
            // Then the folder is only under its new name, everywhere
            let want = ["e/one.txt": "1", "e/inner/two.txt": "2"]
            for dev in [a, b] {
                XCTAssertEqual(dev.tree(), want, "\(kind) \(dev.home.path)")
                XCTAssertFalse(FileManager.default.fileExists(atPath: dev.cache + "/d"), "\(kind): the old folder came back on \(dev.home.path)")
            }
            if case .folder(let path) = remote {
                XCTAssertFalse(FileManager.default.fileExists(atPath: path + "/d"), "the old folder is still on the remote")
            }
        }
    }

    /// A poll of a folder remote that nothing changed since a poll that found nothing to do
    /// ends at the remote's fingerprint (no item's metadata read); after another device's
    /// change, a rewrite of the remote file by another program, or a change of an item's
    /// metadata alone, the next poll is a whole one and finds it.
    func testAPollOfAnUnchangedFolderRemoteEndsAtItsFingerprintAndAChangeIsStillFound() throws {
        guard let (kind, remote) = try remotes().first(where: { $0.0 == "folder" }),
              case .folder(let folder) = remote else { return XCTFail("no folder remote") }
        let (a, b) = try two(remote, kind, files: ["f.txt": "v1", "sub/g.txt": "g1"])
        settleAll(a, b)
        func quiet() -> Int { a.uploader.quietPolls(root: a.rootKey) }
        // A remote changed within the last 2 s has no fingerprint (the file system's clock is
        // coarse): polls read the listing.
        func settled() {
            usleep(UInt32(FolderRemote.settledSeconds * 1_000_000) + 1_100_000)
            a.settle()
        }
        var before = quiet()
        a.settle()
        XCTAssertEqual(quiet(), before, "a poll right after changes")
        // Nothing changed: the polls end at the fingerprint, at most 9 in a row (so 12 polls
        // hold one or two whole ones).
        settled()
        before = quiet()
        for _ in 0..<12 { a.settle() }
        XCTAssertEqual(SyncService.quietPollsInARow, 9)
        XCTAssertTrue((10...11).contains(quiet() - before), "\(quiet() - before) of 12 polls of an unchanged remote were quiet")
        // Each change below is older than 2 s when A looks (so A's poll has a fingerprint,
        // and only the fingerprint can tell the change), and A's last poll found nothing.
        // Another device's save: found by the next poll.
        b.write("sub/g.txt", "g2 from beta")
        b.settle()
        before = quiet()
        settled()
        XCTAssertEqual(a.read("sub/g.txt"), "g2 from beta")
        XCTAssertEqual(quiet(), before, "a poll after a change reads the listing")
        settled()  // the download wrote the bases: a whole poll, which finds nothing
        // Another program rewrites the remote file in place (same size).
        try "v9".write(toFile: folder + "/f.txt", atomically: false, encoding: .utf8)
        before = quiet()
        settled()
        XCTAssertEqual(a.read("f.txt"), "v9")
        XCTAssertEqual(quiet(), before)
        settled()
        // Only the metadata of an item changes on the remote (its id, as a heal of another
        // device writes it): the ctime changes, and the next poll reads it.
        let id = try XCTUnwrap(try a.id("sub/g.txt"))
        var meta = RemoteMeta(itemID: "0d0d0d0d-0000-4000-8000-000000000001")
        meta.deviceID = "other"
        let json = meta.jsonBytes
        let fd = open(folder + "/sub/g.txt", O_RDONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(json.withUnsafeBytes { dd_setxattr_path(fd, "user.docdrive.meta", $0.baseAddress, $0.count, 0) }, 0)
        close(fd)
        before = quiet()
        settled()
        XCTAssertEqual(quiet(), before, "the poll after the metadata's change reads the listing")
        XCTAssertNotEqual(try a.id("sub/g.txt"), id, "the id written on the remote was taken")
        // (The next poll reads it again: taking the id wrote the bases.) Then quiet again.
        a.settle()
        settled()
        XCTAssertGreaterThan(quiet(), before)
    }

    func testAFileRenamedHereAndChangedThereIsRenamedAndChanged() throws {
        for (kind, remote) in try remotes() {
            // Given a file on two devices
            let (a, b) = try two(remote, kind, files: ["f.txt": "v1"])
            let id = try a.id("f.txt")
            // When one changes it and the other, not having looked since, renames it (and syncs
            // the new name first)
            a.write("f.txt", "v2 from alpha")
            a.settle()
            b.rename("f.txt", "g.txt", noted: ["g.txt"])
            b.drain()
            b.note("f.txt")
            settleAll(b, a)
            // Then both apply: one item, renamed and changed, with its id, on both
            for d in [a, b] {
                XCTAssertEqual(d.tree(), ["g.txt": "v2 from alpha"], kind)
                XCTAssertEqual(try d.id("g.txt"), id, kind)
            }
        }
    }

    func testAFileRenamedAndChangedHereWhileChangedThereBecomesTwoItems() throws {
        for (kind, remote) in try remotes() {
            // Given a file on two devices
            let (a, b) = try two(remote, kind, files: ["f.txt": "v1"])
            let id = try a.id("f.txt")
            // When one changes it and the other, not having looked since, renames and changes it
            // (and syncs the new name first)
            a.write("f.txt", "v2 from alpha")
            a.settle()
            b.rename("f.txt", "g.txt", noted: [])
            b.write("g.txt", "v2 from beta")
            b.drain()
            b.note("f.txt")
            settleAll(b, a)
            // Then the change there stays where it was made, the renamed one is a second item,
            // and both devices agree on both ids
            for d in [a, b] {
                XCTAssertEqual(d.tree(), ["f.txt": "v2 from alpha", "g.txt": "v2 from beta"], kind)
                XCTAssertEqual(try d.id("f.txt"), id, kind)
            }
            XCTAssertNotNil(try a.id("g.txt"))
            XCTAssertNotEqual(try a.id("g.txt"), id, kind)
            XCTAssertEqual(try a.id("g.txt"), try b.id("g.txt"), kind)
        }
    }

    func testAFileRenamedOnTwoDevicesTakesTheNameTheRemoteHasFirst() throws {
        for (kind, remote) in try remotes() {
            // Given a file on two devices
            let (a, b) = try two(remote, kind, files: ["f.txt": "v1"])
            let id = try a.id("f.txt")
            // When each renames it, the second without having looked at the remote since
            a.rename("f.txt", "from-alpha.txt")
            a.settle()
            b.rename("f.txt", "from-beta.txt")
            settleAll(b, a)
            // Then it is one item under the name that reached the remote first, on both
            for d in [a, b] {
                XCTAssertEqual(d.tree(), ["from-alpha.txt": "v1"], kind)
                XCTAssertEqual(try d.id("from-alpha.txt"), id, kind)
            }
        }
    }

    func testTheSameMoveOnTwoDevicesThenAChangeOnOneIsADownloadOnTheOtherWhenItsOldPathIsDecidedFirst() throws {
        try sameMoveThenAChange(decidedFirst: "B/f.txt")
    }

    func testTheSameMoveOnTwoDevicesThenAChangeOnOneIsADownloadOnTheOtherWhenItsNewPathIsDecidedFirst() throws {
        try sameMoveThenAChange(decidedFirst: "f.txt")
    }

    /// (Seed 3840959234 of the three-device test on S3: two devices moved B/f10.txt to f10.txt;
    /// the third changed it there. The second mover dropped its base at the old path, so its
    /// unchanged copy met the change as a conflict: it kept its copy, uploaded it over the
    /// change, and the version it had replaced was also another device's conflict copy.)
    private func sameMoveThenAChange(decidedFirst first: String) throws {
        for (kind, remote) in try remotes() {
            // Given a file on two devices
            let (a, b) = try two(remote, kind, files: ["B/f.txt": "v1"])
            let id = try a.id("B/f.txt")
            // When both move it to the same place, one's move reaches the remote first, and that
            // one changes it there before the other looks
            b.rename("B/f.txt", "f.txt")
            b.settle()
            b.write("f.txt", "v2 from beta")
            b.settle()
            a.rename("B/f.txt", "f.txt", noted: [first])
            a.settle()
            a.note(first == "f.txt" ? "B/f.txt" : "f.txt")
            settleAll(a, b)
            // Then the change arrives on the other as a download: one item, no conflict copy
            for d in [a, b] {
                XCTAssertEqual(d.tree(), ["f.txt": "v2 from beta"], "\(kind), \(first) decided first")
                XCTAssertEqual(try d.id("f.txt"), id, kind)
            }
        }
    }

    func testAChangeToAFileMovedOnAnotherDeviceFollowsTheMove() throws {
        for (kind, remote) in try remotes() {
            // Given a file on two devices
            let (a, b) = try two(remote, kind, files: ["f.txt": "v1"])
            let id = try a.id("f.txt")
            // When one moves it, and the other, not having looked since, changes it
            a.rename("f.txt", "moved.txt")
            a.settle()
            b.write("f.txt", "v2 from beta")
            settleAll(b, a)
            // Then the change is the moved file's, one item with its id, on both
            for d in [a, b] {
                XCTAssertEqual(d.tree(), ["moved.txt": "v2 from beta"], kind)
                XCTAssertEqual(try d.id("moved.txt"), id, kind)
            }
        }
    }

    func testAFileThisDeviceUploadedMovedAwayAndBackByAnotherFollowsBothMoves() throws {
        // (Seed 2368072074 of the three-device test on S3: the move back matched the path the
        // upload's metadata names, and the file was taken for an upload a stop kept from its
        // record: deleted on the remote, then here.)
        for (kind, remote) in try remotes() {
            // Given a file this device uploaded, on two devices
            let (a, b) = try two(remote, kind, files: ["f.txt": "v1"])
            let id = try a.id("f.txt")
            // When the other moves it into a folder, this one follows, and the other moves it back
            b.mkdir("A")
            b.rename("f.txt", "A/f.txt")
            settleAll(b, a)
            XCTAssertEqual(a.tree(), ["A/f.txt": "v1"], kind)
            b.rename("A/f.txt", "f.txt")
            settleAll(b, a)
            // Then it is back at its first name on both, one item with its id, nothing deleted
            for d in [a, b] {
                XCTAssertEqual(d.tree(), ["f.txt": "v1"], kind)
                XCTAssertEqual(try d.id("f.txt"), id, kind)
            }
        }
    }

    func testAFileThisDeviceUploadedMovedAwayThenBackByAnotherWhileItFollowedAsADeleteComesBack() throws {
        // (Seed 2233250103 of the three-device test on S3, 2026-11-28: the device that had
        // uploaded the file saw it gone from the remote before it saw where, and deleted its
        // copy; the file then came back under its name, and was taken for an upload a stop had
        // kept from its record, so the deleted copy went up as a delete: the file was gone.)
        for (kind, remote) in try remotes() {
            // Given a file this device uploaded, on two devices
            let (a, b) = try two(remote, kind, files: ["f.txt": "v1"])
            let id = try a.id("f.txt")
            // When the other moves it into a folder, this one sees it gone before it looks at
            // the remote's listing (it deletes its copy), and the other moves it back
            b.mkdir("A")
            b.rename("f.txt", "A/f.txt")
            b.settle()
            a.note("f.txt")
            a.drain()
            XCTAssertNil(a.read("f.txt"), "\(kind): the move was followed as a delete")
            b.rename("A/f.txt", "f.txt")
            b.settle()
            a.note("f.txt")
            settleAll(a, b)
            // Then it is back on both, one item with its id, and on the remote
            for d in [a, b] {
                XCTAssertEqual(d.tree(), ["f.txt": "v1"], kind)
                XCTAssertEqual(try d.id("f.txt"), id, kind)
            }
        }
    }

    func testAFileChangedHereWhileReplacedThereByAnotherItemGoesOnAsThatItem() throws {
        for (kind, remote) in try remotes() {
            // Given a file on two devices
            let (a, b) = try two(remote, kind, files: ["f.txt": "v1"])
            let id = try a.id("f.txt")
            // When one moves it away and makes another file under its name, and the other,
            // not having looked since, changes it
            a.rename("f.txt", "moved.txt")
            a.write("f.txt", "another file")
            a.settle()
            let other = try a.id("f.txt")
            XCTAssertNotEqual(other, id)
            b.write("f.txt", "v2 from beta")
            b.drain()
            settleAll(b, a)
            // Then the change goes over the other file (kept as a conflict copy), as that item,
            // and the moved file keeps its id: one id per item, the same on both devices
            for d in [a, b] {
                let t = d.tree()
                XCTAssertEqual(t["f.txt"], "v2 from beta", kind)
                XCTAssertEqual(t["moved.txt"], "v1", kind)
                XCTAssertEqual(t.count, 3, "\(kind): \(t)")
                XCTAssertEqual(t.first(where: { $0.key.hasPrefix("f (conflict from ") })?.value, "another file", kind)
                XCTAssertEqual(try d.id("f.txt"), other, kind)
                XCTAssertEqual(try d.id("moved.txt"), id, kind)
            }
        }
    }

    func testUploadsAreRecordedOnlyOnceTheirRemoteFolderIsDurable() throws {
        let folder = base + "/remote"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try FolderRemote(root: folder).writeMarker(store: "shared")
        let a = try SyncDevice(base, name: "alpha", remote: .folder(path: folder))
        devices.append(a)
        a.mkdir("sub")
        a.settle()
        // Given a worker about to make what it uploaded durable (a flush of the remote folder)
        // and record it: the first time, the remote folder is taken away (a link in its place)
        let seen = Mutex<[(path: String, recorded: Bool, onRemote: Bool)]>([])
        let firstBatch = Mutex<[String]?>(nil)
        let (bases, root) = (a.index.bases, a.rootKey)
        a.beforeCommit.action.withLock {
            $0 = { paths in
                for p in paths {
                    let recorded = (try? bases.base(root: root, path: StorePath(p))) != nil
                    seen.withLock { $0.append((p, recorded, access(folder + "/" + p, F_OK) == 0)) }
                }
                firstBatch.withLock { first in
                    guard first == nil else { return }
                    first = paths
                    // (In one step, a link taking the folder's place: with a moment of no "sub"
                    // between a rename and a symlink, another worker's upload made the folder
                    // again, and this batch was made durable there.)
                    XCTAssertEqual(symlink("sub-away", folder + "/sub.link"), 0)
                    XCTAssertEqual(dd_renameat2(AT_FDCWD, folder + "/sub.link", AT_FDCWD, folder + "/sub", UInt32(dd_RENAME_EXCHANGE)), 0)
                    XCTAssertEqual(rename(folder + "/sub.link", folder + "/sub-away"), 0)
                }
            }
        }
        let names = (0..<12).map { "sub/f\($0).txt" }
        for p in names { a.write(p, "text of \(p)") }
        // When the first batch's entries have ended (looked at before their first retry: a
        // second later, it fails for another reason)
        let deadline = Date().addingTimeInterval(20)
        var failed = [String: String]()
        repeat {
            usleep(5_000)
            for p in firstBatch.withLock({ $0 }) ?? [] where failed[p] == nil {
                failed[p] = try a.index.uploads.state(root: root, path: StorePath(p))?.1
            }
        } while (firstBatch.withLock { $0 }.map { !$0.allSatisfy { failed[$0] != nil } } ?? true) && Date() < deadline
        // Then the batch whose folder could not be made durable is not recorded: its entries
        // failed, saying why
        let first = try XCTUnwrap(firstBatch.withLock { $0 })
        XCTAssertFalse(first.isEmpty)
        for p in first {
            XCTAssertNil(try bases.base(root: root, path: StorePath(p)), p)
            XCTAssertTrue(failed[p]?.contains("is no longer a folder on the remote") == true, "\(p): \(failed[p] ?? "no failure")")
        }
        // and no path was recorded before its commit; each of the first batch was on the remote by then
        for s in seen.withLock({ $0 }) {
            XCTAssertFalse(s.recorded, "\(s.path) was recorded before its folder was made durable")
        }
        for s in seen.withLock({ $0 }) where first.contains(s.path) { XCTAssertTrue(s.onRemote, s.path) }
        // Once the folder is back, the next tries record every upload (found on the remote as
        // this device's own), each file once on the remote
        a.beforeCommit.action.withLock { $0 = nil }
        XCTAssertEqual(unlink(folder + "/sub"), 0)
        XCTAssertEqual(rename(folder + "/sub-away", folder + "/sub"), 0)
        a.uploader.retryFailedNow()
        a.settle()
        for p in names {
            XCTAssertNotNil(try bases.base(root: root, path: StorePath(p)), p)
            XCTAssertEqual(a.uploader.fileState(root: root, path: StorePath(p), isFile: true, isPlaceholder: { false }), .synced, p)
            XCTAssertEqual(try String(contentsOfFile: folder + "/" + p, encoding: .utf8), "text of \(p)")
        }
        let onRemote = try FileManager.default.contentsOfDirectory(atPath: folder + "/sub").sorted()
        XCTAssertEqual(onRemote, names.map { String($0.dropFirst(4)) }.sorted())
    }

    func testAFileRenamedAwayKeepsItsIDOnceTheRenameReachedTheRemote() throws {
        for (kind, remote) in try remotes() {
            // Given a file on two devices, renamed on one, and the rename on the remote
            let (a, b) = try two(remote, kind, files: ["f.txt": "v1"])
            let id = try a.id("f.txt")
            a.rename("f.txt", "g.txt")
            a.settle()
            // When a new file is made under the old name, which the mount takes for an editor's
            // rename-away save (the new file gets the id, the renamed one a new id)
            a.write("f.txt", "v2")
            var st = stat(), gst = stat(), pst = stat()
            XCTAssertEqual(lstat(a.cache + "/f.txt", &st), 0)
            XCTAssertEqual(lstat(a.cache + "/g.txt", &gst), 0)
            XCTAssertEqual(lstat(a.cache, &pst), 0)
            a.index.record(.reclaimed(root: a.rootKey, ino: Int64(st.st_ino), fromIno: Int64(gst.st_ino), parentIno: Int64(pst.st_ino), name: "f.txt"))
            a.note("g.txt")
            settleAll(a, b)
            // Then the renamed file keeps the id the other device knows, and the new one is a
            // new item, the same on both
            for d in [a, b] {
                XCTAssertEqual(d.tree(), ["f.txt": "v2", "g.txt": "v1"], kind)
                XCTAssertEqual(try d.id("g.txt"), id, kind)
            }
            XCTAssertNotEqual(try a.id("f.txt"), id, kind)
            XCTAssertEqual(try a.id("f.txt"), try b.id("f.txt"), kind)
        }
    }

    func testAFileRenamedOntoANameAnotherDeviceTookLeavesItsOldName() throws {
        for (kind, remote) in try remotes() {
            // Given a file on two devices
            let (a, b) = try two(remote, kind, files: ["f.txt": "v1"])
            // When one renames it, its old name's sync (while the new name is free on the
            // remote) leaves the move to the new name's sync, and right before that one the
            // other device gives the new name to a new file
            b.beforeDeciding.actions.withLock {
                $0["g.txt"] = {
                    a.write("g.txt", "from alpha")
                    a.settle()
                }
            }
            b.rename("f.txt", "g.txt", noted: ["f.txt"])
            b.drain()
            XCTAssertTrue(b.beforeDeciding.actions.withLock { $0.isEmpty }, "\(kind): the new name was decided")
            settleAll(b, a)
            // Then the renamed file wins the name, the other device's file is a conflict copy,
            // and the old name is gone everywhere: both devices and the remote agree
            let t = b.tree()
            XCTAssertEqual(t["g.txt"], "v1", "\(kind): \(t)")
            XCTAssertNil(t["f.txt"], "\(kind): \(t)")
            XCTAssertEqual(t.first(where: { $0.key.hasPrefix("g (conflict from ") })?.value, "from alpha", "\(kind): \(t)")
            XCTAssertEqual(t.count, 2, "\(kind): \(t)")
            XCTAssertEqual(a.tree(), t, kind)
        }
    }

    func testAFileOpenForWritingGoesUpOnlyOnceClosed() throws {
        for (kind, remote) in try remotes() {
            let (a, b) = try two(remote, kind, files: ["f.txt": "v1"])
            // Given a file being written (truncated, half filled) that is queued meanwhile
            a.openForWriting.paths.withLock { _ = $0.insert("f.txt") }
            a.write("f.txt", "half")
            a.settle(timeout: 2)
            b.settle()
            // Then the other device never sees the half-written version
            XCTAssertEqual(b.read("f.txt"), "v1", kind)
            // And once closed, it goes up
            a.write("f.txt", "half and the rest")
            a.openForWriting.paths.withLock { $0.removeAll() }
            settleAll(a, b)
            XCTAssertEqual(b.read("f.txt"), "half and the rest", kind)
        }
    }

    func testAFileOpenedForWritingWhileTheRemotesVersionArrivesKeepsWhatIsWrittenToIt() throws {
        for (kind, remote) in try remotes() {
            let (a, b) = try two(remote, kind, files: ["edited.txt": "v1", "deleted.txt": "v1"])
            // Given a process on the second device that opens both files for writing just after
            // the sync last checked that nobody had them open
            let fds = ["edited.txt", "deleted.txt"].map { p -> (String, Int32) in
                b.openedInTheWindow.paths.withLock { _ = $0.insert(p) }
                return (p, open(b.cache + "/" + p, O_WRONLY))
            }
            for (_, fd) in fds { XCTAssertGreaterThanOrEqual(fd, 0, kind) }
            // When the first device's change and delete arrive meanwhile
            a.write("edited.txt", "v2 from the first device")
            a.remove("deleted.txt")
            a.settle()
            b.settle()
            // And the process then writes through what it opened, and closes
            for (p, fd) in fds {
                let bytes = Array("written by the process to \(p)".utf8)
                XCTAssertEqual(pwrite(fd, bytes, bytes.count, 0), bytes.count, kind)
                XCTAssertEqual(ftruncate(fd, off_t(bytes.count)), 0, kind)
                close(fd)
            }
            b.openedInTheWindow.paths.withLock { $0.removeAll() }
            for (p, _) in fds { b.note(p) }
            settleAll(a, b)
            settleAll(a, b)
            // Then what the process wrote is on both devices, and so is the other device's version
            for (name, d) in [("first", a), ("second", b)] {
                let texts = Set(d.tree().values)
                XCTAssertTrue(texts.contains("written by the process to edited.txt"), "\(kind), \(name) device: \(d.tree())")
                XCTAssertTrue(texts.contains("v2 from the first device"), "\(kind), \(name) device: \(d.tree())")
                XCTAssertEqual(d.read("deleted.txt"), "written by the process to deleted.txt", "\(kind), \(name) device")
            }
        }
    }

    func testAnS3ItemReplacedByAnotherWithTheSameBytesIsSeenWithItsID() throws {
        guard let (kind, remote) = try remotes().first(where: { $0.0 == "s3" }) else { return }
        // Given a file on two devices
        let (a, b) = try two(remote, kind, files: ["f.txt": "same bytes"])
        let id = try a.id("f.txt")
        // When one deletes it and, a second later, makes a new file with the same bytes (S3
        // gives it the same ETag: the MD5 of the content)
        a.remove("f.txt")
        a.settle()
        Thread.sleep(forTimeInterval: 1.1)
        a.write("f.txt", "same bytes")
        a.settle()
        let newID = try a.id("f.txt")
        XCTAssertNotEqual(newID, id)
        // Then the other device, which saw neither, takes the new item's id
        b.settle()
        XCTAssertEqual(b.read("f.txt"), "same bytes")
        XCTAssertEqual(try b.id("f.txt"), newID)
    }

    func testOneItemIDAtTwoPathsOnTheRemoteBecomesTwoItemsOnEveryDevice() throws {
        for (kind, config) in try remotes() {
            // Given a file on two devices
            let (a, b) = try two(config, kind, files: ["f.txt": "v1"])
            let id = try XCTUnwrap(try a.id("f.txt"))
            // When the remote comes to hold its id at a second path too (two devices' changes
            // crossed: one moved it by a new upload, one wrote at the old name)
            let remote: any Remote
            switch config {
            case .folder(let path): remote = FolderRemote(root: path)
            case .s3(let settings): remote = try S3Remote(settings: settings, device: "test")
            }
            let tmp = base + "/copy-\(kind)"
            FileManager.default.createFile(atPath: tmp, contents: Data("v2 elsewhere".utf8))
            let fd = open(tmp, O_RDONLY)
            defer { close(fd) }
            _ = try remote.upload(from: fd, to: "g.txt", expecting: .absent, meta: RemoteMeta(itemID: id, deviceID: "x", deviceName: "gamma"),
                                  limit: nil, progress: nil)
            // and the devices list it twice, the grace apart
            settleAll(a, b)
            Thread.sleep(forTimeInterval: DuplicateIDs.grace + 0.1)
            settleAll(a, b, a, b)
            // Then the first path (in byte order) keeps the id; the other is an item of its own,
            // with one new id on the remote and on both devices
            let items = Dictionary(uniqueKeysWithValues: try remote.list().map { ($0.path.description, $0.meta.itemID) })
            XCTAssertEqual(items["f.txt"], id, kind)
            let other = try XCTUnwrap(items["g.txt"] ?? nil, kind)
            XCTAssertNotEqual(other, id, kind)
            XCTAssertEqual(other, DuplicateIDs.derived(id, at: "g.txt"), kind)
            for d in [a, b] {
                XCTAssertEqual(d.tree(), ["f.txt": "v1", "g.txt": "v2 elsewhere"], kind)
                XCTAssertEqual(try d.id("f.txt"), id, kind)
                XCTAssertEqual(try d.id("g.txt"), other, kind)
            }
        }
    }

    func testAnUploadWhoseRecordACrashCutOffIsTakenForThisDevicesOwnAfterTheRestart() throws {
        for (kind, remote) in try remotes() {
            // Given two files on two devices
            let (first, b) = try two(remote, kind, files: ["gone.txt": "v1", "saved.txt": "v1"])
            var a = first
            // When the first device's uploads of two saves and a new file reach the remote and
            // it stops (a crash) before it records them
            let paths: Set = ["gone.txt", "saved.txt", "new.txt"]
            a.stopAfterUpload.paths.withLock { $0 = paths }
            a.write("gone.txt", "v2")
            a.write("saved.txt", "v2")
            a.write("new.txt", "new")
            let deadline = Date().addingTimeInterval(20)
            while a.stoppedAfterUpload.paths.withLock({ $0 }) != paths && Date() < deadline { usleep(2_000) }
            a.stop()
            XCTAssertEqual(a.stoppedAfterUpload.paths.withLock { $0 }, paths, "\(kind): the uploads reached the remote")
            devices.removeAll { $0 === a }
            // after the user had deleted one of them and the new file, and saved the other again
            XCTAssertEqual(unlink(a.cache + "/gone.txt"), 0)
            XCTAssertEqual(unlink(a.cache + "/new.txt"), 0)
            let fd = open(a.cache + "/saved.txt", O_WRONLY | O_TRUNC)
            XCTAssertEqual(Foundation.write(fd, "v3", 2), 2)
            close(fd)
            // Then, started again, it takes the remote's versions for its own: the deletes and
            // the save go up, nothing comes back, and no conflict copy is made
            a = try SyncDevice(base, name: "alpha-\(kind)", remote: remote, restarting: true)
            devices.append(a)
            settleAll(a, b)
            for d in [a, b] { XCTAssertEqual(d.tree(), ["saved.txt": "v3"], kind) }
        }
    }

    func testNewFilesDeletedOrRenamedAfterUploadsACrashCutOffStayThatWayOnDemand() throws {
        for (kind, remote) in try remotes() {
            // Given a device that keeps content on demand, on a store it knows an item of
            var a = try SyncDevice(base, name: "alpha-\(kind)", remote: remote, content: .onDemand)
            let b = try SyncDevice(base, name: "beta-\(kind)", remote: remote)
            devices += [a, b]
            a.write("known.txt", "v1")
            settleAll(a, b)
            XCTAssertEqual(b.read("known.txt"), "v1", kind)
            // When the uploads of two new files reach the remote and the device stops (a crash)
            // before it records them
            let paths: Set = ["new.txt", "moved.txt"]
            a.stopAfterUpload.paths.withLock { $0 = paths }
            a.write("new.txt", "new")
            a.write("moved.txt", "moved")
            let deadline = Date().addingTimeInterval(20)
            while a.stoppedAfterUpload.paths.withLock({ $0 }) != paths && Date() < deadline { usleep(2_000) }
            // after the user had renamed one of them (the mount records it; the uploader has not
            // heard of it yet)
            a.rename("moved.txt", "renamed.txt", noted: [])
            a.stop()
            XCTAssertEqual(a.stoppedAfterUpload.paths.withLock { $0 }, paths, "\(kind): the uploads reached the remote")
            devices.removeAll { $0 === a }
            // and deleted the other
            XCTAssertEqual(unlink(a.cache + "/new.txt"), 0)
            // Then, started again (the remote's new items are placed before their metadata is
            // read, on S3), it takes the remote's versions for its own: the delete and the rename
            // go up, and neither old name comes back (not even as a placeholder)
            a = try SyncDevice(base, name: "alpha-\(kind)", remote: remote, restarting: true, content: .onDemand)
            devices.append(a)
            a.note("renamed.txt")
            settleAll(a, b)
            for d in [a, b] { XCTAssertEqual(d.tree(), ["known.txt": "v1", "renamed.txt": "moved"], "\(kind) \(d.home.path)") }
            XCTAssertEqual(try a.id("renamed.txt"), try b.id("renamed.txt"), "\(kind): one item on both devices")
        }
    }
}

/// The files a test holds open for writing, by path in the store's local copy (`openForWriting`),
/// and those opened between a check and a change (`openedInTheWindow`). Open for writing here
/// means written and not fsynced since (no test fsyncs).
struct TestOpenFiles: LocalFiles {
    let cache: String
    let openForWriting: PathSet
    let openedInTheWindow: PathSet

    private func holds(_ set: PathSet, _ dev: UInt64, _ ino: UInt64) -> Bool {
        set.paths.withLock { paths in
            paths.contains { p in
                var st = stat()
                return lstat(cache + "/" + p, &st) == 0 && UInt64(st.st_dev) == dev && UInt64(st.st_ino) == ino
            }
        }
    }

    func isOpen(dev: UInt64, ino: UInt64) -> Bool { false }
    func isOpenForWriting(dev: UInt64, ino: UInt64) -> Bool { holds(openForWriting, dev, ino) }
    func unlessOpenForWriting(dev: UInt64, ino: UInt64, _ body: () -> Void) -> Bool {
        guard !holds(openForWriting, dev, ino), !holds(openedInTheWindow, dev, ino) else { return false }
        body()
        return true
    }
    func hasUnsyncedWrites(_ st: stat) -> Bool { isOpenForWriting(dev: UInt64(st.st_dev), ino: UInt64(st.st_ino)) }
}
