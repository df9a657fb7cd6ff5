// StoreSync: two-way sync of one store's local copy with its shared remote (DESIGN.md 9). For one
// path at a time it reads the three sides (local, base, remote), asks SyncDecision what to do,
// and does it: every remote write and delete conditional on the base, every local change made
// under a temporary name and renamed into place under a writing intent.
import CDocDriveSys
import Crypto
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A store's item in its local copy.
struct LocalItem {
    var path: StorePath
    var kind: SyncEntry.Kind
    var st: stat
    /// A placeholder (Placeholder.swift): no content here, never uploaded.
    var placeholder = false
    /// The version the sync sees (a placeholder's is its base's: it never changes here).
    var tokenOverride: String? = nil
    /// Same form as the folder remote's version: size, mtime, inode ("" for a folder).
    var token: String { tokenOverride ?? FolderRemote.version(st) }
    var entry: SyncEntry { SyncEntry(path: path.description, kind: kind, token: token) }
}

/// Files uploaded by one worker whose durability on the remote and bases wait for
/// `StoreSync.commit` (`Remote.uploadDurableLater`); their paths stay locked until then. Used by
/// one thread.
final class UploadBatch {
    /// Files up to this size are uploaded durable later; a bigger one's upload takes long, and
    /// the batch is committed before it.
    static let smallFile: off_t = 1 << 20
    var bases = [BaseRow]()
    var folders = Set<StorePath>()
    var locked = [StorePath]()
    /// Paths whose upload could not be committed, and why.
    var failures = [StorePath: String]()
}

/// What one sync of a path did.
enum SyncOutcome: Equatable {
    case synced, removed
    /// Another worker holds this path or one above or below it, or it waits for another
    /// path's sync (a listing, a rename's move): again shortly.
    case busy
}

/// The state `docdrive status` shows for a store's remote.
public struct RemoteState: Equatable, Sendable, Codable {
    public var lastPoll: Double?
    /// When a poll last listed the whole remote (a poll that ends at the fingerprint does not):
    /// on S3, what another tool wrote before then is shown here.
    public var lastListing: Double? = nil
    /// When a poll last read the remote's journal (S3: another DocDrive device's changes are
    /// found there between whole listings).
    public var lastJournal: Double? = nil
    public var offlineSince: Double?
    public var offlineReason: String?
    /// Names of the devices that wrote what the remote holds (`deviceNames`).
    public var devices: [String] = []
    /// Why the last download of a placeholder failed (cleared by the next that succeeds).
    public var downloadProblem: String? = nil
    /// Bytes of content kept on this device, as last counted (stores with a cache limit).
    public var cacheBytes: Int64? = nil
    /// Polls (looks at the remote) that listed it since the mount.
    public var polls: Int? = nil

    /// The names of the devices that wrote `metas`, sorted; two devices of one name (two
    /// machines with one host name) are told apart by the start of their ids.
    public static func deviceNames(_ metas: some Sequence<RemoteMeta>) -> [String] {
        var idsByName = [String: Set<String>]()
        for m in metas {
            guard let name = m.deviceName else { continue }
            idsByName[name, default: []].insert(m.deviceID ?? "")
        }
        return idsByName.flatMap { name, ids in
            ids.count == 1 ? [name] : ids.map { $0.isEmpty ? name : "\(name) (\($0.prefix(8)))" }
        }.sorted()
    }

    public init(lastPoll: Double? = nil, offlineSince: Double? = nil, offlineReason: String? = nil, devices: [String] = []) {
        (self.lastPoll, self.offlineSince, self.offlineReason, self.devices) = (lastPoll, offlineSince, offlineReason, devices)
    }
}

final class StoreSync: Sendable {
    let key: String
    let name: String
    let cache: String
    let downloads: String
    let remote: EngineRemote
    let device: DeviceIdentity
    let index: ItemIndex
    let queue: UploadQueue
    let coordinator: Coordinator
    let logger: Logger
    /// Which local files are open through the mount.
    let localFiles: any LocalFiles
    /// Where the changes made here for the remote are published (the drive's stream).
    let changes: DriveChanges
    /// A test's moments (nil in a drive).
    let probe: SyncProbe?
    let limit: BandwidthLimit?
    /// Whether listed files come down as placeholders (on-demand) or with their content.
    let content: StoreConfig.ContentMode
    /// The most bytes of content an on-demand store keeps here (nil: no limit); what it keeps
    /// now as last counted is in `status`.
    let cacheLimit: Int64?
    /// What the opens of placeholders one after another download ahead (Readahead.swift).
    let readahead = Readahead()

    // The sync's memory, one type per concern, each with its rules at its declaration.
    /// The paths workers hold now, and the folders they are making on the remote.
    let claims = PathClaims()
    /// The polls started and ended (a `docdrive sync` waits for one that started after it asked).
    let polls: PollCounters
    /// What the last listing of the remote showed (ids, paths, duplicate ids, the last quiet poll).
    let lastListing = ListingMemory()
    /// Paths that wait for a listing, and this device's creates that no listing has shown yet.
    let waits: ListingWaits
    /// Files whose base was dropped because the remote no longer had them.
    let dropped = DroppedBases()
    /// What `docdrive status` shows of the remote, and the content kept here as last counted.
    let status = RemoteStatus()
    /// Uploads in progress are shown by the uploader.
    let progress: @Sendable (StorePath, Int64, Int64, TransferDirection) -> Void
    let progressDone: @Sendable (StorePath) -> Void
    /// Paths whose state changed, for the desktop status socket (the uploader's).
    let statusMarks: StatusMarks
    /// Filled placeholders whose content is not known to be on the disk yet.
    let fills: FillCommits
    /// Files a delete from the remote took from the local copy, kept a while (`deleted` beside
    /// the cache).
    let recentlyDeleted: RecentlyDeleted
    /// Seconds within which a whole listing comes however quiet the polls, where the remote's
    /// fingerprint does not see every writer (StoreConfig.reconcile).
    let reconcile: Double

    init(key: String, name: String, cache: String, downloads: String, remote: any Remote, device: DeviceIdentity,
         index: ItemIndex, coordinator: Coordinator, logger: Logger, limit: BandwidthLimit?,
         content: StoreConfig.ContentMode = .allLocal, cacheLimit: Int64? = nil,
         localFiles: any LocalFiles, changes: DriveChanges, probe: SyncProbe? = nil,
         progress: @escaping @Sendable (StorePath, Int64, Int64, TransferDirection) -> Void, progressDone: @escaping @Sendable (StorePath) -> Void,
         statusMarks: StatusMarks = StatusMarks(), reconcile: Double = StoreConfig.defaultReconcile) {
        self.reconcile = reconcile
        self.key = key
        self.name = name
        self.cache = cache
        self.downloads = downloads
        // Next to the downloads folder: the store's own state.
        self.remote = EngineRemote(remote, device: device.id, deviceName: device.name,
                                   pendingFile: (downloads as NSString).deletingLastPathComponent + "/unannounced-writes")
        self.device = device
        self.index = index
        self.queue = index.uploads
        self.coordinator = coordinator
        self.logger = logger
        self.limit = limit
        self.content = content
        self.cacheLimit = cacheLimit
        let polls = PollCounters()
        self.polls = polls
        self.waits = ListingWaits(polls: polls)
        self.localFiles = localFiles
        self.changes = changes
        self.probe = probe
        self.progress = progress
        self.progressDone = progressDone
        self.statusMarks = statusMarks
        self.fills = FillCommits(name: name, logger: logger, marker: (downloads as NSString).deletingLastPathComponent + "/fills-waiting")
        self.recentlyDeleted = RecentlyDeleted(folder: RecentlyDeleted.folder(ofStore: (downloads as NSString).deletingLastPathComponent))
    }

    var bases: BaseVersions { index.bases }

    // MARK: path locks

    /// Holds `paths` (`claims`), unless a worker holds one of them, a folder above or a path
    /// in it: false then.
    func tryLock(_ paths: [StorePath]) -> Bool { claims.claim(paths) }

    func unlock(_ paths: [StorePath]) { claims.release(paths) }

    // MARK: the local side

    func openCache() throws(DriveError) -> Int32 {
        let fd = open(cache, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw DriveError.io("cannot open the local copy \(cache)", .init(rawValue: errno)) }
        return fd
    }

    /// The local item at `path`, or nil when there is none (a folder on the way gone counts).
    func localItem(_ path: StorePath) throws(DriveError) -> LocalItem? {
        let cachefd = try openCache()
        defer { close(cachefd) }
        guard case .success(let dir) = Beneath.openFolder(cachefd, path.folder.names) else { return nil }
        defer { close(dir) }
        guard let st = Beneath.stat(dir, path.lastName) else {
            if errno == ENOENT || errno == ENOTDIR { return nil }
            throw DriveError.io("cannot read \(path) in the local copy", .init(rawValue: errno))
        }
        guard let kind = FolderRemote.kind(st) else {
            throw DriveError(.unsupported, "\(path) is \(SyncService.kindPhrase(st.st_mode)); a remote holds files, folders and symbolic links, so it is not carried there.")
        }
        return LocalItem(path: path, kind: kind, st: st,
                         placeholder: kind == .file && Placeholder.isPlaceholder(dir, path.lastName))
    }

    /// The item id of the local item (assigned now if it never had one).
    func localID(_ item: LocalItem) -> String? {
        guard let cachefd = try? openCache() else { return nil }
        defer { close(cachefd) }
        guard case .success(let dir) = Beneath.openFolder(cachefd, item.path.folder.names) else { return nil }
        defer { close(dir) }
        var pst = stat()
        guard fstat(dir, &pst) == 0 else { return nil }
        let kind: ItemKind = item.kind == .folder ? .directory : item.kind == .symlink ? .symlink : .file
        return try? index.itemID(root: key, ino: Int64(item.st.st_ino), parentIno: Int64(pst.st_ino),
                                 name: String(decoding: item.path.lastName, as: UTF8.self), kind: kind)
    }

    func cacheInode() -> Int64? {
        var st = stat()
        return lstat(cache, &st) == 0 ? Int64(st.st_ino) : nil
    }

    func isBusyLocally(_ item: LocalItem?) -> Bool {
        guard let item, item.kind == .file else { return false }
        return localFiles.isOpenForWriting(dev: UInt64(item.st.st_dev), ino: UInt64(item.st.st_ino))
    }

    /// Runs `change`, which renames over or unlinks the local file `st` (as it is now), unless a
    /// process has that file open for writing through the mount: false then, and nothing done.
    /// The check and the change are one step under the open-files lock. Checked first and
    /// changed after, an open for writing in between would keep the old file, which no name
    /// holds any more, and its writes would be lost; opened after, it finds the file unlinked
    /// and answers ESTALE, and the kernel looks the name up again (FileSystem's open).
    func unlessOpenForWriting(_ st: stat?, _ change: () -> Void) -> Bool {
        guard let st, st.st_mode & S_IFMT == S_IFREG else { change(); return true }
        return localFiles.unlessOpenForWriting(dev: UInt64(st.st_dev), ino: UInt64(st.st_ino), change)
    }

    func folderPath(_ path: StorePath) -> String {
        path.folder.isEmpty ? cache : cache + "/" + String(decoding: path.folder.bytes, as: UTF8.self)
    }

    /// A path the sync engine changed behind the mount: the kernel forgets what it knew of it,
    /// and a file manager listening on the status socket is told its new state (their
    /// subscriptions to `.entry`).
    func told(_ path: StorePath) {
        changes.publish(.remote(.entry(root: key, path: path, folder: folderPath(path))))
    }

    /// Where an item of the local copy is now and which it is: published for the item index.
    func recordItem(_ event: ItemEvent) {
        changes.publish(.remote(.item(event)))
    }

    /// Records in the item index that `name` in `dir` is now the item `id`.
    func recordPlaced(_ dir: Int32, _ path: StorePath, id: String?, replacing old: stat?) {
        var st = stat(), pst = stat()
        guard fstat(dir, &pst) == 0, let s = Beneath.stat(dir, path.lastName) else { return }
        st = s
        let name = String(decoding: path.lastName, as: UTF8.self)
        let kind: ItemKind = st.st_mode & S_IFMT == S_IFDIR ? .directory : st.st_mode & S_IFMT == S_IFLNK ? .symlink : .file
        if let id {
            // The id moves here from another local item that had it (an item moved away on the
            // remote, and another one written under its old name): that one learns its id anew.
            if let rootIno = cacheInode(), let p = try? index.knownPath(id: id, root: key, rootIno: rootIno), StorePath(p) != path {
                try? queue.enqueue(root: key, path: StorePath(p), due: 0)
            }
            // The id this one leaves may be another path's (two paths took one id in turns while
            // the remote held it at both, until it was healed): that path takes it back.
            if let old = try? index.knownItemID(root: key, ino: Int64(st.st_ino)), old != id,
               let b = try? bases.base(root: key, id: old), b.path != path {
                try? queue.enqueue(root: key, path: b.path, due: 0)
            }
            recordItem(.created(root: key, ino: Int64(st.st_ino), parentIno: Int64(pst.st_ino), name: name, kind: kind, id: id))
        } else if let old {
            recordItem(.replaced(root: key, ino: Int64(st.st_ino), oldIno: Int64(old.st_ino), parentIno: Int64(pst.st_ino), name: name))
        }
    }

    /// The local item becomes the item `id` (made on another device): one id on every device.
    func takeID(_ id: String, for l: LocalItem) {
        guard let cachefd = try? openCache() else { return }
        defer { close(cachefd) }
        guard case .success(let dir) = Beneath.openFolder(cachefd, l.path.folder.names) else { return }
        defer { close(dir) }
        recordPlaced(dir, l.path, id: id, replacing: nil)
    }

    /// Opens a local file for a writing intent (its write lock needs a writable descriptor),
    /// never following a link; -1 when it cannot be opened.
    static func openForIntent(_ dir: Int32, _ name: ArraySlice<UInt8>) -> Int32 {
        Beneath.withCName(name) { openat(dir, $0, O_RDWR | dd_O_NOFOLLOW | dd_O_CLOEXEC) }
    }

    /// A file for a download, on the same file system as the cache (renamed into place after).
    /// `sub`: a folder of its own in the downloads folder (`placingFolder`), for threads that
    /// make files at once (a folder's new entries are made one at a time).
    func makeTemporary(in sub: String? = nil) throws(DriveError) -> (fd: Int32, path: String) {
        let folder = sub.map { downloads + "/" + $0 } ?? downloads
        let path = folder + "/" + ItemIndex.newID()
        var fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | dd_O_NOFOLLOW, 0o600)
        if fd < 0, errno == ENOENT {
            _ = mkdir(downloads, 0o700)
            if sub != nil { _ = mkdir(folder, 0o700) }
            fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | dd_O_NOFOLLOW, 0o600)
        }
        guard fd >= 0 else { throw DriveError.io("cannot make a download file in \(downloads)", .init(rawValue: errno)) }
        return (fd, path)
    }

    /// Downloads the remote item into a temporary file; the caller places or removes it.
    func fetch(_ r: RemoteItem) throws(DriveError) -> (fd: Int32, path: String, item: RemoteItem) {
        let tmp = try makeTemporary()
        do throws(DriveError) {
            let got = try remote.download(r.path, version: r.version, to: tmp.fd) { [progress] done, total in progress(r.path, done, total, .down) }
            progressDone(r.path)
            if got.kind == .file {
                guard fsync(tmp.fd) == 0 else { throw DriveError.io("cannot write the download of \(r.path)", .init(rawValue: errno)) }
                _ = fchmod(tmp.fd, got.meta.fileMode)
                if let ns = got.meta.mtimeNanoseconds {
                    var times = [timespec(tv_sec: 0, tv_nsec: Int(dd_UTIME_OMIT)),
                                 Timestamp.timespec(ns)]
                    _ = futimens(tmp.fd, &times)
                }
            }
            return (tmp.fd, tmp.path, got)
        } catch {
            progressDone(r.path)
            close(tmp.fd)
            unlink(tmp.path)
            throw error
        }
    }

    /// A placeholder of the remote file `r` in a temporary file (placed like a download).
    func placeholderFile(_ r: RemoteItem, in sub: String? = nil) throws(DriveError) -> (fd: Int32, path: String, item: RemoteItem) {
        let tmp = try makeTemporary(in: sub)
        guard Placeholder.fill(fd: tmp.fd, as: r) else {
            let e = errno
            close(tmp.fd)
            unlink(tmp.path)
            throw DriveError.io("cannot make the placeholder of \(r.path) in \(downloads)", .init(rawValue: e))
        }
        return (tmp.fd, tmp.path, r)
    }

    /// Whether the two open files hold the same bytes.
    static func sameContent(_ a: Int32, _ b: Int32) -> Bool {
        guard let x = try? FolderRemote.sha256(of: a, named: ""), let y = try? FolderRemote.sha256(of: b, named: "") else { return false }
        return x == y
    }

    /// Opens (making them) the local folders of `path`.
    func openLocalFolder(_ cachefd: Int32, _ folder: StorePath) throws(DriveError) -> Int32 {
        switch Beneath.openFolder(cachefd, folder.names, create: true) {
        case .success(let fd): return fd
        case .failure:
            throw DriveError(.io, "\(folder) cannot be made a folder in the local copy (a file or a link is in the way).")
        }
    }
}
