// AnnouncementTests: a device tells the others of its writes (EngineRemote.announce, S3's change
// mark) after they landed, whichever worker's batch ends first.
import DocDriveCore
import Foundation
import Synchronization
import XCTest

/// A folder remote that writes down its uploads and announcements in order, and can hold an
/// upload until told.
final class AnnouncingRemote: Remote, @unchecked Sendable {
    let folder: FolderRemote
    let log = Mutex<[String]>([])
    let holding = Atomic<Bool>(false)
    let started = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)

    init(_ folder: FolderRemote) { self.folder = folder }

    var displayName: String { folder.displayName }
    var fingerprintSeesEveryWriter: Bool { false }
    func announceChanges(_ batch: JournalBatch) throws(RemoteError) {
        log.withLock { $0.append("announce" + batch.changes.map { " \($0.op.rawValue) \($0.path)" }.joined()) }
    }
    func checkReachable() throws(RemoteError) { try folder.checkReachable() }
    func list() throws(RemoteError) -> [RemoteItem] { try folder.list() }
    func item(at path: StorePath) throws(RemoteError) -> RemoteItem? { try folder.item(at: path) }
    func download(_ path: StorePath, version: String?, to out: Int32, progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> RemoteItem {
        try folder.download(path, version: version, to: out, progress: progress)
    }
    func upload(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> RemoteItem {
        if holding.load(ordering: .acquiring) {
            started.signal()
            release.wait()
        }
        let r = try folder.upload(from: source, to: path, expecting: expecting, meta: meta, limit: limit, progress: progress)
        log.withLock { $0.append("uploaded \(path)") }
        return r
    }
    func makeFolder(_ path: StorePath, meta: RemoteMeta) throws(RemoteError) -> RemoteItem { try folder.makeFolder(path, meta: meta) }
    func makeSymlink(_ target: [UInt8], at path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta) throws(RemoteError) -> RemoteItem {
        try folder.makeSymlink(target, at: path, expecting: expecting, meta: meta)
    }
    func delete(_ path: StorePath, version: String) throws(RemoteError) { try folder.delete(path, version: version) }
    func move(_ from: StorePath, version: String, to: StorePath) throws(RemoteError) -> RemoteItem { try folder.move(from, version: version, to: to) }
    func reassign(_ path: StorePath, version: String, meta: RemoteMeta) throws(RemoteError) -> RemoteItem { try folder.reassign(path, version: version, meta: meta) }
    func removeStaleUploads() -> Int { folder.removeStaleUploads() }
    func picture(item id: String) throws(RemoteError) -> [UInt8]? { try folder.picture(item: id) }
    func putPicture(item id: String, _ png: [UInt8]) throws(RemoteError) { try folder.putPicture(item: id, png) }
}

final class AnnouncementTests: XCTestCase {
    var dir: String!

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "dd-announce-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir + "/remote", withIntermediateDirectories: true)
        try FolderRemote(root: dir + "/remote").writeMarker(store: "work")
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// A run's first announcement is made whatever it wrote (a stop may have left writes
    /// unannounced); then one per batch that wrote, none for a batch that did not.
    func testTheFirstAnnouncementIsMadeThenOnlyAfterWrites() throws {
        let fake = AnnouncingRemote(FolderRemote(root: dir + "/remote"))
        let engine = EngineRemote(fake)
        engine.announce()
        engine.announce()
        XCTAssertEqual(fake.log.withLock { $0 }, ["announce"])
        FileManager.default.createFile(atPath: dir + "/local", contents: Data("one".utf8))
        let fd = open(dir + "/local", O_RDONLY)
        defer { close(fd) }
        _ = try engine.upload(from: fd, to: "a.txt", expecting: .absent, meta: RemoteMeta(), limit: nil, progress: nil)
        engine.announce()
        engine.announce()
        XCTAssertEqual(fake.log.withLock { $0 }, ["announce", "uploaded a.txt", "announce put a.txt"])
    }

    /// One worker's batch ends (and announces) while another worker's upload is on its way: that
    /// upload is announced after it landed, by its own batch's end, not taken by the first
    /// announcement before it landed and then never announced.
    func testAWriteInFlightWhenAnotherWorkerAnnouncesIsAnnouncedAfterItLands() throws {
        let fake = AnnouncingRemote(FolderRemote(root: dir + "/remote"))
        let engine = EngineRemote(fake)
        FileManager.default.createFile(atPath: dir + "/local", contents: Data("one".utf8))
        let fd = open(dir + "/local", O_RDONLY)
        defer { close(fd) }
        fake.holding.store(true, ordering: .releasing)
        let done = DispatchSemaphore(value: 0)
        // Worker 1: an upload, then its batch's announcement.
        Thread {
            _ = try? engine.upload(from: fd, to: "a.txt", expecting: .absent, meta: RemoteMeta(), limit: nil, progress: nil)
            engine.announce()
            done.signal()
        }.start()
        XCTAssertEqual(fake.started.wait(timeout: .now() + 10), .success)
        // Worker 2's batch ends while worker 1's upload is on its way.
        engine.announce()
        fake.release.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        let log = fake.log.withLock { $0 }
        XCTAssertEqual(log.last, "announce put a.txt", "the upload was never announced after it landed: \(log)")
        XCTAssertEqual(log.firstIndex(of: "uploaded a.txt").map { $0 < log.count - 1 }, true, "\(log)")
    }
}
