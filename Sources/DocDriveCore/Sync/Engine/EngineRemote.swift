// EngineRemote: a store's remote as the sync engine calls it: the same calls, each failure in the
// engine's own terms (a RemoteError becomes the engine's error here, and nowhere else).
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The remote of a store, as `StoreSync` uses it. Forwards every call to `remote`; a failure is
/// the engine's error with the remote's sentence and its code mapped once (`DriveError.init(_:)`),
/// so the engine decides on one error type.
package struct EngineRemote: Sendable {
    package let remote: any Remote
    /// Who writes: named in each journal batch.
    package let device: String
    package let deviceName: String?
    /// The writes this device made on the remote since it last announced them (`announce`),
    /// shared by the copies of this value.
    private let unannounced: UnannouncedWrites
    /// A file that exists from a write until its announcement (nil: none kept): found at the
    /// start, it says a stop left writes unannounced, which the first announcement cannot name
    /// (`JournalBatch.whole`: the other devices list the store).
    private let pendingFile: String?

    package init(_ remote: any Remote, device: String = "", deviceName: String? = nil, pendingFile: String? = nil) {
        self.remote = remote
        self.device = device
        self.deviceName = deviceName
        self.pendingFile = pendingFile
        unannounced = UnannouncedWrites(whole: pendingFile.map { access($0, F_OK) == 0 } ?? true)
    }

    /// Tells the other devices of the writes made since the last time (`Remote.announceChanges`:
    /// S3's journal and change mark), when there were any. A failure leaves them for the next
    /// call. Workers call it at once: the first takes the changes, the others find none (what
    /// they wrote was done when the changes were taken, so its announcement covers it).
    package func announce() {
        let (changes, whole) = unannounced.changes.withLock { u in
            defer { u = ([], false) }
            return u
        }
        guard whole || !changes.isEmpty else { return }
        do {
            try remote.announceChanges(JournalBatch(device: device, deviceName: deviceName, changes: changes, whole: whole))
            if let pendingFile {
                unannounced.changes.withLock { u in
                    if u.changes.isEmpty, !u.whole { unlink(pendingFile) }  // none noted since
                }
            }
        } catch {
            unannounced.changes.withLock { u in u = (changes + u.changes, whole || u.whole) }
        }
    }

    /// Notes a write once it is done, whether it succeeded or not (one that failed may still
    /// have reached the remote: named without a version): never before, or an announcement made
    /// meanwhile by another worker would take it while it has not landed, and nobody would
    /// announce it after.
    private func wrote(_ change: JournalChange) {
        unannounced.changes.withLock { u in
            if u.changes.isEmpty, let pendingFile {
                let fd = open(pendingFile, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
                if fd >= 0 { close(fd) }
            }
            u.changes.append(change)
        }
    }

    /// `body`'s item, its write noted as `change` with the item's id and version.
    private func noting(_ change: JournalChange, _ body: () throws(DriveError) -> RemoteItem) throws(DriveError) -> RemoteItem {
        var c = change
        do {
            let r = try body()
            (c.id, c.version) = (r.meta.itemID ?? c.id, r.version)
            wrote(c)
            return r
        } catch {
            wrote(c)
            throw error
        }
    }

    package var displayName: String { remote.displayName }

    package var fingerprintSeesEveryWriter: Bool { remote.fingerprintSeesEveryWriter }

    package var keepsJournal: Bool { remote.keepsJournal }

    package func journalTime() throws(DriveError) -> Int64? { try call { () throws(RemoteError) in try remote.journalTime() } }

    package func readJournal(after cursor: JournalCursor) throws(DriveError) -> JournalPage {
        try call { () throws(RemoteError) in try remote.readJournal(after: cursor) }
    }

    private func call<T>(_ body: () throws(RemoteError) -> T) throws(DriveError) -> T {
        do { return try body() } catch { throw DriveError(error) }
    }

    package func checkReachable() throws(DriveError) { try call { () throws(RemoteError) in try remote.checkReachable() } }

    package func listQuickly() throws(DriveError) -> RemoteListing {
        try call { () throws(RemoteError) in try remote.listQuickly() }
    }

    package func listQuickly(pages: (_ items: [RemoteItem], _ pending: Set<StorePath>) -> Void) throws(DriveError) -> RemoteListing {
        try call { () throws(RemoteError) in try remote.listQuickly(pages: pages) }
    }

    package func complete(_ listing: consuming RemoteListing) throws(DriveError) -> [RemoteItem] {
        do { return try remote.complete(listing) } catch { throw DriveError(error) }
    }

    package func fingerprint() throws(DriveError) -> [UInt8]? { try call { () throws(RemoteError) in try remote.fingerprint() } }

    package func item(at path: StorePath) throws(DriveError) -> RemoteItem? {
        try call { () throws(RemoteError) in try remote.item(at: path) }
    }

    package func download(_ path: StorePath, version: String?, to out: Int32,
                  progress: ((Int64, Int64) -> Void)?) throws(DriveError) -> RemoteItem {
        try call { () throws(RemoteError) in try remote.download(path, version: version, to: out, progress: progress) }
    }

    package func upload(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(DriveError) -> RemoteItem {
        try noting(JournalChange(.put, path, id: meta.itemID, previous: expecting.version)) { () throws(DriveError) in
            try call { () throws(RemoteError) in
                try remote.upload(from: source, to: path, expecting: expecting, meta: meta, limit: limit, progress: progress)
            }
        }
    }

    package func uploadDurableLater(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                            limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(DriveError) -> (item: RemoteItem, folder: StorePath?) {
        var folder: StorePath?
        let item = try noting(JournalChange(.put, path, id: meta.itemID, previous: expecting.version)) { () throws(DriveError) in
            let r = try call { () throws(RemoteError) in
                try remote.uploadDurableLater(from: source, to: path, expecting: expecting, meta: meta, limit: limit, progress: progress)
            }
            folder = r.folder
            return r.item
        }
        return (item, folder)
    }

    package func makeDurable(_ folders: Set<StorePath>) throws(DriveError) {
        try call { () throws(RemoteError) in try remote.makeDurable(folders) }
    }

    package func makeFolder(_ path: StorePath, meta: RemoteMeta) throws(DriveError) -> RemoteItem {
        try noting(JournalChange(.put, path, id: meta.itemID)) { () throws(DriveError) in
            try call { () throws(RemoteError) in try remote.makeFolder(path, meta: meta) }
        }
    }

    package func makeSymlink(_ target: [UInt8], at path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta) throws(DriveError) -> RemoteItem {
        try noting(JournalChange(.put, path, id: meta.itemID, previous: expecting.version)) { () throws(DriveError) in
            try call { () throws(RemoteError) in try remote.makeSymlink(target, at: path, expecting: expecting, meta: meta) }
        }
    }

    package func delete(_ path: StorePath, version: String) throws(DriveError) {
        defer { wrote(JournalChange(.delete, path, previous: version.isEmpty ? nil : version)) }
        try call { () throws(RemoteError) in try remote.delete(path, version: version) }
    }

    package func move(_ from: StorePath, version: String, to: StorePath) throws(DriveError) -> RemoteItem {
        try noting(JournalChange(.move, to, from: from, previous: version.isEmpty ? nil : version)) { () throws(DriveError) in
            try call { () throws(RemoteError) in try remote.move(from, version: version, to: to) }
        }
    }

    package func reassign(_ path: StorePath, version: String, meta: RemoteMeta) throws(DriveError) -> RemoteItem {
        try noting(JournalChange(.put, path, id: meta.itemID, previous: version)) { () throws(DriveError) in
            try call { () throws(RemoteError) in try remote.reassign(path, version: version, meta: meta) }
        }
    }

    package func picture(item id: String) throws(DriveError) -> [UInt8]? {
        try call { () throws(RemoteError) in try remote.picture(item: id) }
    }

    package func putPicture(item id: String, _ png: [UInt8]) throws(DriveError) {
        try call { () throws(RemoteError) in try remote.putPicture(item: id, png) }
    }

    package func removeStaleUploads() -> Int { remote.removeStaleUploads() }

    package func finishCleanup() { remote.finishCleanup() }
}

/// The writes a device made on a remote since it last announced them (`EngineRemote`), and
/// whether there were writes it cannot name (a run's start: those a stop left unannounced).
private final class UnannouncedWrites: Sendable {
    let changes: Mutex<(changes: [JournalChange], whole: Bool)>

    init(whole: Bool) { changes = Mutex(([], whole)) }
}
