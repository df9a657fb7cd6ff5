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
    let remote: any Remote
    let device: DeviceIdentity
    let index: ItemIndex
    let queue: UploadQueue
    let coordinator: Coordinator
    let logger: Logger
    /// Which local files are open through the mount.
    let localFiles: any LocalFiles
    /// Where the changes made here for the remote are published.
    let changes: RemoteChanges
    /// A test's moments (nil in a drive).
    let probe: SyncProbe?
    let limit: BandwidthLimit?
    /// Whether listed files come down as placeholders (on-demand) or with their content.
    let content: StoreConfig.ContentMode
    /// The most bytes of content an on-demand store keeps here (nil: no limit), and what it
    /// keeps now as last counted (nil before the first count). Lock: leaf.
    let cacheLimit: Int64?
    let cacheUse = Mutex<Int64?>(nil)
    /// What the opens of placeholders one after another download ahead (Readahead.swift).
    let readahead = Readahead()
    /// Paths a worker is syncing now; a path conflicts with itself, its folders and what is in
    /// it. Lock: leaf.
    private let busyPaths = Mutex<[StorePath]>([])
    /// The last listing of the remote's item ids (for renames made on another device, and what a
    /// folder made or placed holds). Lock: leaf.
    private let remoteIDs = Mutex(ListedIDs())
    /// Files whose base this device dropped because the remote no longer had them (deleted, or
    /// moved away by another device), with the local version the base named. This device's
    /// upload of that version, found at that path again (moved back by another device), was
    /// recorded once: it is not an upload a stop kept from its record (`ownUnrecordedUpload`).
    /// In memory (emptied at 10,000 entries). Lock: leaf.
    private let droppedBases = Mutex<[StorePath: String]>([:])
    /// Files this device created on the remote (written where nothing was, on a remote that
    /// names a write's parent: S3) that no listing has shown yet: the version, and how many polls
    /// had started when the write returned. Another create found in its place before a listing
    /// showed it was made by a writer that never saw it (`SyncDecision.createdOver`). In memory
    /// (emptied at 10,000 entries; a restart forgets them). Lock: leaf.
    private let unlistedCreates = Mutex<[StorePath: (version: String, polls: Int)]>([:])
    /// Item ids the listing found at several paths (files and links), with the paths and the
    /// time they were first listed so (`healDuplicateIDs`).
    private let duplicateIDs = Mutex<[String: (paths: [StorePath], since: Double)]>([:])

    /// The hashes of every path the last listing of the remote held (files, folders, links),
    /// nil before the first one: a path that is not among them is new since (see `newHereID`).
    /// Two paths with one hash only cost the usual look at the remote. Lock: leaf.
    private let listed = Mutex<Set<Int>?>(nil)
    /// Folders a worker is making on the remote now: a worker that needs one of them waits for
    /// it instead of making it too. (Every worker of a `cp -r` starts in the same new folder;
    /// SeaweedFS answers the second of two conditional writes of one key after a retry of its
    /// own, a second later.) Lock: leaf.
    private let makingFolders = Mutex<Set<StorePath>>([])
    /// Paths that wait for a listing of the remote made after they were looked at, with how
    /// many polls had started then (`listedSinceNoticed`). Lock: leaf.
    private let noticed = Mutex<[StorePath: Int]>([:])
    let state = Mutex(RemoteState())
    /// Polls started and done (a `docdrive sync` waits for one that started after it asked).
    let pollsStarted = Atomic<Int>(0)
    let polls = Atomic<Int>(0)
    /// Polls that ended at the remote's fingerprint (`startPoll`), of `polls`.
    let quietPolls = Atomic<Int>(0)
    /// The last poll that found nothing to do: the remote's fingerprint, taken before its
    /// listing, and the bases' generation, read before it compared them. A poll that finds both
    /// the same would compare the same listing with the same bases and find nothing again: it
    /// ends there, without reading every item's metadata; `row` counts such polls since the
    /// last whole one. Lock: leaf.
    private let quiet = Mutex<(fingerprint: [UInt8], bases: UInt64, row: Int)?>(nil)
    /// At most this many polls in a row end at the fingerprint; the next is a whole one (the
    /// limit of what a fingerprint can miss: FolderRemote.fingerprint).
    static let quietPollsInARow = 9
    /// How many objects the last listing left unshown (`RemoteListing.unshown`): logged when
    /// it changes, not at every poll.
    private let unshownLogged = Atomic<Int>(0)
    let pollWanted = Atomic<Bool>(false)
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

    init(key: String, name: String, cache: String, downloads: String, remote: any Remote, device: DeviceIdentity,
         index: ItemIndex, coordinator: Coordinator, logger: Logger, limit: BandwidthLimit?,
         content: StoreConfig.ContentMode = .allLocal, cacheLimit: Int64? = nil,
         localFiles: any LocalFiles, changes: RemoteChanges, probe: SyncProbe? = nil,
         progress: @escaping @Sendable (StorePath, Int64, Int64, TransferDirection) -> Void, progressDone: @escaping @Sendable (StorePath) -> Void,
         statusMarks: StatusMarks = StatusMarks()) {
        self.key = key
        self.name = name
        self.cache = cache
        self.downloads = downloads
        self.remote = remote
        self.device = device
        self.index = index
        self.queue = index.uploads
        self.coordinator = coordinator
        self.logger = logger
        self.limit = limit
        self.content = content
        self.cacheLimit = cacheLimit
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

    private static func overlaps(_ a: StorePath, _ b: StorePath) -> Bool {
        func under(_ x: StorePath, _ y: StorePath) -> Bool {
            y.isEmpty || x == y || (x.bytes.count > y.bytes.count && x.bytes.starts(with: y.bytes) && x.bytes[y.bytes.count] == UInt8(ascii: "/"))
        }
        return under(a, b) || under(b, a)
    }

    func tryLock(_ paths: [StorePath]) -> Bool {
        busyPaths.withLock { held in
            for p in paths where held.contains(where: { Self.overlaps($0, p) }) { return false }
            held.append(contentsOf: paths)
            return true
        }
    }

    func unlock(_ paths: [StorePath]) {
        busyPaths.withLock { held in
            for p in paths { if let i = held.firstIndex(of: p) { held.remove(at: i) } }
        }
    }

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
            throw DriveError(.unsupported, "\(path) is \(Uploader.kindPhrase(st.st_mode)); a remote holds files, folders and symbolic links, so it is not carried there.")
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

    private func cacheInode() -> Int64? {
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

    private func folderPath(_ path: StorePath) -> String {
        path.folder.isEmpty ? cache : cache + "/" + String(decoding: path.folder.bytes, as: UTF8.self)
    }

    /// A path the sync engine changed behind the mount: the kernel forgets what it knew of it,
    /// and a file manager listening on the status socket is told its new state.
    func told(_ path: StorePath) {
        changes.publish(.entry(folder: folderPath(path), name: String(decoding: path.lastName, as: UTF8.self)))
        statusMarks.mark(root: key, path: path)
    }

    /// Records in the item index that `name` in `dir` is now the item `id`.
    private func recordPlaced(_ dir: Int32, _ path: StorePath, id: String?, replacing old: stat?) {
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
            index.record(.created(root: key, ino: Int64(st.st_ino), parentIno: Int64(pst.st_ino), name: name, kind: kind, id: id))
        } else if let old {
            index.record(.replaced(root: key, ino: Int64(st.st_ino), oldIno: Int64(old.st_ino), parentIno: Int64(pst.st_ino), name: name))
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
    private func fetch(_ r: RemoteItem) throws(DriveError) -> (fd: Int32, path: String, item: RemoteItem) {
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
    private static func sameContent(_ a: Int32, _ b: Int32) -> Bool {
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

    // MARK: one path

    /// Syncs `path`: reads the three sides, decides, acts. A remote that changed under a
    /// conditional write is read again and decided again (a few times at most). With `batch`,
    /// a file's upload may leave its durability and its record to `commit(batch)` (the path
    /// stays locked until then).
    func sync(_ path: StorePath, batch: UploadBatch? = nil) throws(DriveError) -> SyncOutcome {
        guard tryLock([path]) else { return .busy }
        // (An upload left to the batch put the path last in its `locked`; no other path of a
        // batch can be this one, which tryLock would have refused.)
        defer { if batch?.locked.last != path { unlock([path]) } }
        probe?.willDecide(path.description)
        var attempt = 0
        while true {
            do {
                return try syncOnce(path, firstTry: attempt == 0, batch: batch)
            } catch let e where e.code == .remoteChanged && attempt < 3 {
                attempt += 1
                logger.debug("store \(name): \(e.message) Deciding again.")
            }
        }
    }

    /// The item id of `path` when it is a file made on this device since the remote was last
    /// listed (nil when it is not): no base
    /// here, not in that listing, and its item has no base at another path (it is not a rename).
    /// Its upload is then create-only (S3 `If-None-Match: *`, a folder remote's no-replace
    /// rename) without a look at the remote first, which on S3 is a HEAD and a listing of
    /// `path/` per file: a bulk copy of small files costs one request per file, not three.
    /// Anything written at `path` since refuses the write (`.remoteChanged`) and the path is
    /// decided again with the remote read (`firstTry` false). The one thing S3's condition
    /// does not see is a folder made at that name since the listing (keys under `path/`): a
    /// look leaves the same race between it and the write, and it loses nothing (both stay,
    /// and this device's sync of the path fails naming what is in the way).
    private func newHereID(_ path: StorePath, _ local: LocalItem?, _ base: BaseRow?, firstTry: Bool) throws(DriveError) -> String? {
        guard firstTry, base == nil, let l = local, l.kind == .file, !l.placeholder,
              listed.withLock({ $0.map { !$0.contains(path.hashValue) } }) == true,
              let id = localID(l), try bases.base(root: key, id: id) == nil,
              remoteIDs.withLock({ $0[id] }) == nil else { return nil }
        return id
    }

    /// Whether the remote was listed (the poll's listing, `remoteIDs`) since this path was first
    /// found needing it: if not, a poll is asked for, and the path waits for it (`.busy`).
    private func listedSinceNoticed(_ path: StorePath) -> Bool {
        let mark = noticed.withLock { m in
            if let at = m[path] { return at }
            let now = pollsStarted.load(ordering: .relaxed)
            m[path] = now
            return now
        }
        // Polls run one at a time: once more have ended than had started, one started since.
        if polls.load(ordering: .relaxed) >= mark + 1 { return true }
        pollWanted.store(true, ordering: .relaxed)
        return false
    }

    /// The local item `l` at `path`, where the remote has nothing, is an item the remote has or
    /// had under another path (this device's base, or the last listing, says where): renamed
    /// here. Moves it there (then `base` and `remoteItem` are the moved item's, and nil is
    /// returned: the path is decided as usual), or here when another device moved it elsewhere
    /// too (its name wins, as in SyncDecision). Nil when it is not such an item, when it was
    /// deleted on the remote (it goes up again from here), and when it was changed at its old
    /// path on the remote and here too (it stays there as changed; this one goes up as another
    /// item, `uploadID`).
    private func renamedHere(_ path: StorePath, _ l: LocalItem, base: inout BaseRow?, remoteItem: inout RemoteItem?) throws(DriveError) -> SyncOutcome? {
        guard let r = remoteItem else {
            return try renamedHereOntoNothing(path, l, base: &base, remoteItem: &remoteItem)
        }
        // Renamed here onto a name another device took meanwhile: no move, this path is
        // decided as it is (a conflict). The old path's sync may have left it to this one
        // ("that path's sync moves it"): it is decided again, as gone here.
        if let id = try index.knownItemID(root: key, ino: Int64(l.st.st_ino)), base?.id != id,
           let old = try baseOfItem(id, elsewhereThan: path), try localItem(old.path) == nil {
            // Unless the other device's item is this one, moved there the same way (the remote
            // has it here and not at the old path, both looked at now): then this device's base
            // goes along, and the path is decided against the version this device knew (a
            // change made there since is a download, not a conflict).
            if base == nil, old.kind == .file, l.kind == .file, r.meta.itemID == id,
               try remote.item(at: old.path)?.meta.itemID != id {
                guard tryLock([old.path]) else { return .busy }
                defer { unlock([old.path]) }
                try bases.move(root: key, from: old.path, to: path)
                base = try bases.base(root: key, path: path)
                logger.debug("store \(name): \(old.path) was moved to \(path) here and on \(remote.displayName): its base goes along")
                return nil
            }
            try? queue.enqueue(root: key, path: old.path, due: 0)
        }
        return nil
    }

    /// `renamedHere` where the remote has nothing at `path`.
    private func renamedHereOntoNothing(_ path: StorePath, _ l: LocalItem, base: inout BaseRow?, remoteItem: inout RemoteItem?) throws(DriveError) -> SyncOutcome? {
        guard let id = localID(l), base?.id != id else { return nil }
        let old = try baseOfItem(id, elsewhereThan: path)
        let listed = remoteIDs.withLock { $0[id] }
        guard old != nil || (listed != nil && listed != path) else { return nil }
        if let old {
            // Still there locally as this item, or as the very file the base knows (the mount
            // gave its id to a new file made under the name it was renamed away from, an
            // editor's save, after the rename reached the remote): nothing moved. The file here
            // is another item (`uploadID`), and the one there keeps the id the remote knows.
            if let there = try localItem(old.path), localID(there) == id || there.token == old.localToken { return nil }
            // What is at or under the old path may be syncing now: decided once it is not.
            guard tryLock([old.path]) else { return .busy }
            defer { unlock([old.path]) }
            if let r = try remote.item(at: old.path) {
                guard Self.movesWithRename(r, base: old, renamed: l) else { return nil }
                let moved: RemoteItem
                do {
                    moved = try remote.move(old.path, version: r.version, to: path)
                } catch let e where e.code != .remoteChanged {
                    // A move cut short (S3: copied, then the delete of the source failed) is
                    // finished by the retry of this path, which finds the copy and adopts it: the
                    // old path must be looked at again, or its object stays on the remote. (A
                    // refused condition is decided again, with the bases as they are.)
                    try? queue.enqueue(root: key, path: old.path, due: 0)
                    throw e
                }
                try bases.move(root: key, from: old.path, to: path)
                logger.info("store \(name): moved \(old.path) to \(path) on the remote")
                base = try bases.base(root: key, path: path)
                remoteItem = moved
                // Whatever took the old name since (a new folder, a new file) is its own item,
                // and what moved with a folder is looked at again under its new path (a delete
                // of it decided before the move found nothing there then).
                try? queue.enqueue(root: key, path: old.path, due: 0)
                if moved.kind == .folder { try requeueInside(path) }
                return nil
            }
        }
        // Gone from where this device knew it on the remote: moved by another device too, or
        // deleted there. Which one, a listing made since tells.
        guard listedSinceNoticed(path) else { return .busy }
        guard let to = remoteIDs.withLock({ $0[id] }), to != path, try localItem(to) == nil,
              let r = try remote.item(at: to), r.meta.itemID == id else { return nil }
        guard tryLock([to]) else { return .busy }
        defer { unlock([to]) }
        try moveLocal(path, to: to)
        if let old { try bases.move(root: key, from: old.path, to: to) }
        if r.kind == .folder { try requeueInside(to) }
        logger.info("store \(name): \(path) was moved to \(to) on another device as well; its name there is kept")
        try? queue.enqueue(root: key, path: to, due: 0)
        return .synced
    }

    /// Whether the remote item `r`, at the path of `base`, goes to where the item was renamed
    /// here (`renamed`): it is still the version the base knew, or, when the file was not
    /// changed here, the same item changed on another device (the rename here and the change
    /// there both apply: the change then comes down under the new name). A file renamed and
    /// changed here while changed there stays where it is there.
    static func movesWithRename(_ r: RemoteItem, base: BaseRow, renamed: LocalItem) -> Bool {
        if r.version == base.remoteToken { return true }
        return renamed.token == base.localToken && r.kind == base.kind && r.meta.itemID != nil && r.meta.itemID == base.id
    }

    /// One decision for `path` (its lock held); a path decided is no longer waiting for a listing.
    private func syncOnce(_ path: StorePath, firstTry: Bool = false, batch: UploadBatch? = nil) throws(DriveError) -> SyncOutcome {
        let outcome = try syncLocked(path, firstTry: firstTry, batch: batch)
        if outcome != .busy { noticed.withLock { _ = $0.removeValue(forKey: path) } }
        return outcome
    }

    /// The remote item `r`, new at `path` (nothing here, no base), is an item this device has
    /// under another local name that the remote does not have: its old path (the item was
    /// moved on another device) or the name it was given here (renamed on both devices: the
    /// remote's name wins, as in SyncDecision). The local item moves here; then `local` and
    /// `base` are the moved item's and nil is returned (the path is decided as usual).
    private func movedThere(_ path: StorePath, _ r: RemoteItem, local: inout LocalItem?, base: inout BaseRow?) throws(DriveError) -> SyncOutcome? {
        guard let id = r.meta.itemID else { return nil }
        let old = try baseOfItem(id, elsewhereThan: path)
        // Where the item is here: the index knows; else at its old path.
        var places = [StorePath]()
        if let rootIno = cacheInode(), let p = try? index.knownPath(id: id, root: key, rootIno: rootIno) { places.append(StorePath(p)) }
        if let old { places.append(old.path) }
        for from in places where from != path {
            guard let l = try localItem(from), l.kind == r.kind, localID(l) == id, try remote.item(at: from) == nil else { continue }
            // Its old path's object must be gone too (a move, not a copy on the remote).
            if let old, old.path != from, try remote.item(at: old.path)?.meta.itemID == id { return nil }
            guard tryLock([from]) else { return .busy }
            defer { unlock([from]) }
            try moveLocal(from, to: path)
            if let old { try bases.move(root: key, from: old.path, to: path) }
            if r.kind == .folder { try requeueInside(path) }
            logger.info("store \(name): \(from) was moved to \(path) on another device; moved here too")
            try? queue.enqueue(root: key, path: from, due: 0)
            local = try localItem(path)
            base = try bases.base(root: key, path: path)
            return nil
        }
        return nil
    }

    /// `droppedBases` gains `b` (a file's base dropped because the remote no longer has it).
    private func noteDropped(_ b: BaseRow) {
        guard b.kind == .file, !b.localToken.isEmpty else { return }
        droppedBases.withLock { m in
            if m.count >= 10_000 { m.removeAll() }
            m[b.path] = b.localToken
        }
    }

    /// Where the file of base `b`, gone from `path` here and on the remote, is now on both: the
    /// listing has its item at that path (and the remote still has, looked at now), and so does
    /// this device's copy, with no base there (this device and another moved it to the same
    /// place). Nil when it is not such a file.
    private func sameMoveElsewhere(_ b: BaseRow, from path: StorePath) -> StorePath? {
        guard b.kind == .file, let id = b.id, let to = remoteIDs.withLock({ $0[id] }), to != path,
              (try? bases.base(root: key, path: to)) == nil,
              let l = try? localItem(to), l.kind == .file, !l.placeholder,
              (try? index.knownItemID(root: key, ino: Int64(l.st.st_ino))) == id,
              // the listing may be older than a change since (moved on, or deleted): looked at now
              let there = (try? remote.item(at: to)) ?? nil, there.meta.itemID == id else { return nil }
        return to
    }

    /// The base of the item `id` when it is at another path than `path` (the item moved, here
    /// or on another device, or is known there under another name).
    private func baseOfItem(_ id: String, elsewhereThan path: StorePath) throws(DriveError) -> BaseRow? {
        try bases.base(root: key, id: id).flatMap { $0.path != path ? $0 : nil }
    }

    private func syncLocked(_ path: StorePath, firstTry: Bool = false, batch: UploadBatch? = nil) throws(DriveError) -> SyncOutcome {
        var local = try localItem(path)
        var base = try bases.base(root: key, path: path)
        let newID = try newHereID(path, local, base, firstTry: firstTry)
        var remoteItem = newID != nil ? nil : try remote.item(at: path)
        // This device's own upload, made before a stop that came before its record: the base
        // takes it, and what changed here since (a delete, a new save) is decided against it.
        if let r = remoteItem, let made = try ownUnrecordedUpload(path, r, local: local, base: base) {
            if local?.placeholder == true { local = try localItem(path) }  // (a placeholder placed again is gone)
            let b = BaseRow(path: path, id: r.meta.itemID ?? base?.id, kind: .file, localToken: made, remoteToken: r.version, parent: r.meta.parent)
            try bases.put(root: key, b)
            base = b
            logger.info("store \(name): \(path): the remote holds this device's upload of it from before a stop; recorded as seen")
        }

        // Renamed here: the local item is an item the remote has (or had) under another path.
        if newID == nil, let l = local, let outcome = try renamedHere(path, l, base: &base, remoteItem: &remoteItem) { return outcome }
        // A placeholder holds nothing of the user's: unchanged here when the base knows it, and
        // not there at all when it does not (a download's leftover, replaced by the next one).
        if let l = local, l.placeholder {
            if let b = base, b.kind == .file { local?.tokenOverride = b.localToken } else { local = nil }
        }
        // A folder here that is another item than the one the base knew (renamed away, and a
        // new one made under its name): what is in either is looked at on its own.
        if let l = local, l.kind == .folder, let b = base, b.kind == .folder, let id = localID(l), b.id != nil, b.id != id {
            try queueChildren(path, remoteToo: true)
            var nb = b
            nb.id = id
            try bases.put(root: key, nb)
        }
        // Gone from the remote while changed here: it may have been moved on another device,
        // after the last listing. It is looked for in a listing made after it was found gone
        // (the change then follows the move below); re-made here before, it would be on the
        // remote twice, under two names with one id.
        if let l = local, l.kind != .folder, let b = base, b.id != nil, remoteItem == nil,
           l.token != b.localToken || isBusyLocally(l), !listedSinceNoticed(path) {
            return .busy
        }
        // Renamed on another device: nothing here on the remote, but the item is elsewhere there.
        if remoteItem == nil, local != nil, let b = base, let id = b.id, let to = remoteIDs.withLock({ $0[id] }), to != path,
           let r = try remote.item(at: to), r.meta.itemID == id, try localItem(to) == nil {
            guard tryLock([to]) else { return .busy }
            defer { unlock([to]) }
            try moveLocal(path, to: to)
            try bases.move(root: key, from: path, to: to)
            if r.kind == .folder { try requeueInside(to) }
            logger.info("store \(name): \(path) was moved to \(to) on another device; moved here too")
            try? queue.enqueue(root: key, path: to, due: 0)
            return .synced
        }
        // The same from the new name's side.
        if local == nil, base == nil, let r = remoteItem, let outcome = try movedThere(path, r, local: &local, base: &base) {
            return outcome
        }

        // Gone here because it was renamed: the new name's sync moves it on the remote (a
        // delete here would lose the item's id on the other devices).
        if local == nil, let b = base, let id = b.id, let r = remoteItem, let rootIno = cacheInode(),
           let p = try? index.knownPath(id: id, root: key, rootIno: rootIno), StorePath(p) != path,
           try bases.base(root: key, path: StorePath(p)) == nil, try remote.item(at: StorePath(p)) == nil,
           let there = try localItem(StorePath(p)), localID(there) == id, Self.movesWithRename(r, base: b, renamed: there) {
            logger.debug("store \(name): \(path) was renamed here to \(p): that path's sync moves it")
            try? queue.enqueue(root: key, path: StorePath(p), due: 0)
            // This path is looked at again until that sync has moved it (its base goes with the
            // item): the file may be renamed on or deleted before that, or the new name taken
            // on the remote, and then this path is decided as gone here.
            return .busy
        }
        var syncBase = base?.base
        if let b = base, b.kind == .file, unlistedCreates.withLock({ $0[path]?.version }) == b.remoteToken { syncBase?.unlistedCreate = true }
        let item = SyncItem(local: local?.entry, base: syncBase,
                            // (The version a remote version was written over: for a version of the
                            // base's item only; another item moved here tells nothing about the
                            // base's, but for whether it was a create.)
                            remote: remoteItem.map { SyncEntry(path: $0.path.description, kind: $0.kind, token: $0.version,
                                                               parent: $0.meta.itemID != nil && $0.meta.itemID == base?.id ? $0.meta.parent
                                                                   : $0.meta.parent == RemoteMeta.created ? RemoteMeta.created : nil) },
                            localBusy: isBusyLocally(local), localIsPlaceholder: local?.placeholder ?? false)
        let plan = SyncDecision.decide(item)
        logger.debug("store \(name): \(path): local \(local?.token ?? "-") base \(base?.localToken ?? "-")/\(base?.remoteToken ?? "-") remote \(remoteItem?.version ?? "-"): \(plan) (ids \(local.flatMap { try? index.knownItemID(root: key, ino: Int64($0.st.st_ino)) } ?? "-") \(base?.id ?? "-") \(remoteItem?.meta.itemID ?? "-"))")
        switch plan.action {
        case .none:
            // One item, one id on every device: the remote's id is the item's.
            if let l = local, let r = remoteItem, let rid = r.meta.itemID, rid != localID(l) {
                takeID(rid, for: l)
                if var b = base {
                    b.id = rid
                    // A placeholder of an id of this device's (placed before its metadata was
                    // read, and renamed here meanwhile) takes the remote's mode and time too.
                    if l.placeholder, r.kind == .file, let token = placeholderTakesAttributes(path, r) { b.localToken = token }
                    try bases.put(root: key, b)
                }
            }
            return .synced
        case .adopt:
            let l = local!
            var r = remoteItem!
            // A folder the remote made on the way to a file moved or uploaded into it has no id:
            // it is given this device's, so that a rename of it elsewhere arrives as a rename.
            if l.kind == .folder, r.meta.itemID == nil, let id = localID(l) {
                var m = meta(id: id)
                m.mode = UInt32(l.st.st_mode & 0o7777)
                r = try remote.makeFolder(path, meta: m)
            }
            if let rid = r.meta.itemID, rid != localID(l) { takeID(rid, for: l) }
            try bases.put(root: key, BaseRow(path: path, id: r.meta.itemID ?? localID(l), kind: l.kind, localToken: l.token, remoteToken: r.version,
                                             parent: r.meta.parent))
            return .synced
        case .upload:
            try upload(local!, base: base, remoteThere: remoteItem, id: newID, batch: batch)
            return .synced
        case .download:
            try download(remoteItem!, over: local, base: base)
            return .synced
        case .deleteRemote:
            return try deleteRemote(path, base: base!)
        case .deleteLocal:
            noteDropped(base!)
            return try deleteLocal(local!, base: base!)
        case .forget:
            // Gone here and there: deleted on both, or moved on both (where to, a listing made
            // since it was found gone tells; see sameMoveElsewhere).
            if let b = base, b.kind == .file, b.id != nil, !listedSinceNoticed(path) { return .busy }
            if let b = base, let to = sameMoveElsewhere(b, from: path) {
                guard tryLock([to]) else { return .busy }
                defer { unlock([to]) }
                if try bases.base(root: key, path: to) == nil {
                    try bases.move(root: key, from: path, to: to)
                    logger.debug("store \(name): \(path) was moved to \(to) here and on \(remote.displayName): its base goes along")
                    try? queue.enqueue(root: key, path: to, due: 0)
                    return .removed
                }
            }
            if let b = base { noteDropped(b) }
            try bases.remove(root: key, path: path)
            return .removed
        case .conflict:
            if let b = item.base, let r = item.remote, !item.localBusy, SyncDecision.replacedUnseen(b, r) {
                logger.warning("store \(name): \(path): the version this device last saw on \(remote.displayName) was replaced by \(remoteItem!.meta.deviceName ?? "another device")'s, written at the same moment over the version before it (the server let both writes succeed); both are kept")
            } else if let b = item.base, let r = item.remote, !item.localBusy, SyncDecision.createdOver(b, r) {
                logger.warning("store \(name): \(path): this device's new file was replaced on \(remote.displayName) by \(remoteItem!.meta.deviceName ?? "another device")'s, made at the same moment under the same name (the server let both creates succeed); both are kept")
            }
            if item.base?.unlistedCreate == true { unlistedCreates.withLock { _ = $0.removeValue(forKey: path) } }
            try conflict(local!, remoteItem!, base: base)
            return .synced
        }
    }

    // MARK: actions

    private func meta(id: String?) -> RemoteMeta {
        RemoteMeta(itemID: id, deviceID: device.id, deviceName: device.name)
    }

    /// Makes the folders above `path` on the remote with their ids (top down), where this
    /// device has no base for them yet: a folder's id travels like a file's.
    private func ensureRemoteFolders(_ folder: StorePath) throws(DriveError) {
        guard !folder.isEmpty, try bases.base(root: key, path: folder) == nil else { return }
        // One worker makes it; another that needs it waits, then finds its base. (A worker
        // waits only for a folder at or above its own, so waits never go round in a circle.)
        guard makingFolders.withLock({ $0.insert(folder).inserted }) else {
            while makingFolders.withLock({ $0.contains(folder) }) { usleep(2_000) }
            return try ensureRemoteFolders(folder)
        }
        defer { _ = makingFolders.withLock { $0.remove(folder) } }
        try ensureRemoteFolders(folder.folder)
        guard let l = try localItem(folder), l.kind == .folder else { return }
        let id = localID(l)
        var m = meta(id: id)
        m.mode = UInt32(l.st.st_mode & 0o7777)
        let r = try remote.makeFolder(folder, meta: m)
        if let rid = r.meta.itemID, rid != id { takeID(rid, for: l) }  // another device made it first
        try bases.put(root: key, BaseRow(path: folder, id: r.meta.itemID ?? id, kind: .folder, localToken: "", remoteToken: r.version))
    }

    /// Where the remote holds the item `id` at another path than `path` (where this device's
    /// base or the last listing has it), if it does.
    private func placeElsewhere(_ id: String, than path: StorePath) throws(DriveError) -> StorePath? {
        var places = Set<StorePath>()
        if let p = remoteIDs.withLock({ $0[id] }), p != path { places.insert(p) }
        if let b = try baseOfItem(id, elsewhereThan: path) { places.insert(b.path) }
        for p in places where try remote.item(at: p)?.meta.itemID == id { return p }
        return nil
    }

    /// The id a local item goes up with. Over a remote item that is not the one this device
    /// last saw here (another device made it, or put it in the place of the one seen here,
    /// which may live on elsewhere): that item's id, the local version goes on as it. Else
    /// its own, unless the remote holds that id at another path (a file moved here, where it
    /// could not be moved on the remote: another device changed it at its old path, or made an
    /// item under its new name); then the id of what it replaces here, or a new one, and its
    /// old path is decided again on its own (changed there: it stays; else it goes). One id is
    /// never two items on the remote.
    private func uploadID(_ l: LocalItem, base: BaseRow?, replacing remoteThere: RemoteItem?) throws(DriveError) -> String? {
        let id = localID(l)
        guard let id, l.kind != .folder else { return id }
        if let rid = remoteThere?.meta.itemID, rid != id, base?.id != rid {
            takeID(rid, for: l)
            return rid
        }
        guard let old = try placeElsewhere(id, than: l.path) else { return id }
        let other = remoteThere?.meta.itemID.flatMap { $0 == id ? nil : $0 } ?? ItemIndex.newID()
        logger.info("store \(name): \(l.path) goes up as another item than \(old) (which could not be moved there)")
        takeID(other, for: l)
        try? queue.enqueue(root: key, path: old, due: 0)
        return other
    }

    /// `knownID`: the id of a file new here (`newHereID`), which no other path has. `batch`: a
    /// small file's upload is made durable and recorded by `commit(batch)`.
    private func upload(_ l: LocalItem, base: BaseRow?, remoteThere: RemoteItem?, id knownID: String? = nil, batch: UploadBatch? = nil) throws(DriveError) {
        if l.placeholder {
            throw DriveError(.busy, "\(l.path) is a placeholder here (its content was never downloaded); it is not uploaded.")
        }
        try ensureRemoteFolders(l.path.folder)
        let id: String?
        if let knownID { id = knownID } else { id = try uploadID(l, base: base, replacing: remoteThere) }
        let expecting: RemoteExpectation = remoteThere.map { _ in .version(base?.remoteToken ?? "") } ?? .absent
        switch l.kind {
        case .folder:
            var m = meta(id: id)
            m.mode = UInt32(l.st.st_mode & 0o7777)
            let r = try remote.makeFolder(l.path, meta: m)
            if let rid = r.meta.itemID, rid != id { takeID(rid, for: l) }  // another device made it first
            try bases.put(root: key, BaseRow(path: l.path, id: r.meta.itemID ?? id, kind: .folder, localToken: "", remoteToken: r.version))
            // What is in it on either side (a folder moved in, or made before a crash).
            try queueChildren(l.path, remoteToo: true)
        case .symlink:
            let cachefd = try openCache()
            defer { close(cachefd) }
            guard case .success(let dir) = Beneath.openFolder(cachefd, l.path.folder.names),
                  let target = Beneath.readLink(dir, l.path.lastName) else {
                throw DriveError(.changedDuringUpload, "\(l.path) changed while it was uploaded; it will be uploaded again.")
            }
            close(dir)
            let r = try remote.makeSymlink(target, at: l.path, expecting: expecting, meta: meta(id: id))
            try bases.put(root: key, BaseRow(path: l.path, id: id, kind: .symlink, localToken: l.token, remoteToken: r.version))
        case .file:
            // A file open for writing may be half written (truncated, not yet filled): it goes up
            // once closed (its close queues it), never as a version no process closed.
            if localFiles.hasUnsyncedWrites(l.st) { throw DriveError(.lockedForWriting, "\(l.path) is open for writing") }
            let cachefd = try openCache()
            defer { close(cachefd) }
            guard case .success(let dir) = Beneath.openFolder(cachefd, l.path.folder.names) else {
                throw DriveError(.changedDuringUpload, "\(l.path) changed while it was uploaded; it will be uploaded again.")
            }
            defer { close(dir) }
            let fd = Beneath.openForReading(dir, l.path.lastName)
            guard fd >= 0 else { throw DriveError(.changedDuringUpload, "\(l.path) changed while it was uploaded; it will be uploaded again.") }
            defer { close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0 else { throw DriveError.io("cannot read \(l.path) in the local copy", .init(rawValue: errno)) }
            // The file's mtime and mode travel with it (a download on another device sets them).
            var m = meta(id: id)
            m.mtimeNanoseconds = Timestamp.nanoseconds(st.st_mtim)
            m.mode = UInt32(st.st_mode & 0o7777)
            m.origin = Self.origin(FolderRemote.version(st), at: l.path)
            // A big file's upload takes long: what the batch holds is recorded before it, not after.
            let later = st.st_size <= UploadBatch.smallFile ? batch : nil
            if let batch, later == nil { commit(batch) }
            let r: RemoteItem
            var unflushed: StorePath?
            do {
                (r, unflushed) = try coordinator.coordinate([.init(fd: fd, .reading)], options: .forUploading, timeout: 2.0) {
                    if later == nil {
                        return (try remote.upload(from: fd, to: l.path, expecting: expecting, meta: m, limit: limit) { [progress] d, t in
                            progress(l.path, d, t, .up)
                        }, nil)
                    }
                    return try remote.uploadDurableLater(from: fd, to: l.path, expecting: expecting, meta: m, limit: limit) { [progress] d, t in
                        progress(l.path, d, t, .up)
                    }
                }
            } catch let e as DriveError where e.code == .busy {
                progressDone(l.path)
                throw DriveError(.lockedForWriting, "\(l.path) is locked for writing")
            } catch let e as DriveError {
                progressDone(l.path)
                throw e
            } catch {
                progressDone(l.path)
                throw DriveError(.io, "\(error)")
            }
            progressDone(l.path)
            try probe?.uploaded(l.path.description)
            // Changed while it went up (a remote that streams without checking, S3): the remote
            // holds what was read; this device has seen that version and sends the file again.
            var after = stat()
            if fstat(fd, &after) == 0, FolderRemote.version(after) != FolderRemote.version(st) || after.st_ctim.tv_nsec != st.st_ctim.tv_nsec {
                if let folder = unflushed { try remote.makeDurable([folder]) }
                try bases.put(root: key, BaseRow(path: l.path, id: id, kind: .file, localToken: "", remoteToken: r.version, parent: r.meta.parent))
                throw DriveError(.changedDuringUpload, "\(l.path) changed while it was uploaded; it will be uploaded again.")
            }
            let row = BaseRow(path: l.path, id: id, kind: .file, localToken: FolderRemote.version(st), remoteToken: r.version, parent: r.meta.parent)
            notePossiblyUnlisted(l.path, r)
            if let later, let folder = unflushed {
                later.bases.append(row)
                later.folders.insert(folder)
                later.locked.append(l.path)
            } else {
                try bases.put(root: key, row)
            }
        }
    }

    /// Keeps (or forgets) the upload `r` at `path` among the creates no listing has shown yet (a
    /// create names `RemoteMeta.created` as its parent; a remote that names no parent never has one).
    private func notePossiblyUnlisted(_ path: StorePath, _ r: RemoteItem) {
        let polls = pollsStarted.load(ordering: .relaxed)
        unlistedCreates.withLock { m in
            guard r.meta.parent == RemoteMeta.created else { m.removeValue(forKey: path); return }
            if m.count >= 10_000 { m.removeAll() }
            m[path] = (r.version, polls)
        }
    }

    /// What the listing of a poll (`items`, `at`) tells of the creates no listing had shown: one
    /// it shows is seen; one a listing made after it (`done` polls had ended before this one)
    /// shows replaced by another create is kept for its path's decision, and otherwise forgotten.
    private func listedCreates(_ items: [RemoteItem], at: [StorePath: Int], done: Int) {
        unlistedCreates.withLock { m in
            guard !m.isEmpty else { return }
            m = m.filter { path, c in
                guard let k = at[path] else { return done < c.polls }
                let r = items[k]
                if r.version == c.version { return false }
                return done < c.polls || (r.kind == .file && r.meta.parent == RemoteMeta.created)
            }
        }
    }

    /// Makes the uploads `batch` holds durable on the remote (one flush of each folder they
    /// went into), then records their bases (one transaction), and unlocks their paths. Until
    /// then a crash of the machine could lose an upload whose base says the remote has it (and
    /// the next sync would take the file for deleted on the remote). When the flush or the
    /// record fails, no base is written: each path's entry fails with the reason
    /// (`batch.failures`), and its next sync finds its upload on the remote (`ownUnrecordedUpload`).
    func commit(_ batch: UploadBatch) {
        guard !batch.locked.isEmpty else { return }
        probe?.willCommitUploads(batch.locked.map(\.description))
        do throws(DriveError) {
            try remote.makeDurable(batch.folders)
            try bases.putAll(root: key, batch.bases)
        } catch {
            logger.warning("store \(name): \(batch.locked.count) uploads are not recorded: \(error.message)")
            for p in batch.locked { batch.failures[p] = error.message }
        }
        unlock(batch.locked)
        batch.bases.removeAll()
        batch.folders.removeAll()
        batch.locked.removeAll()
    }

    /// The local version this device uploaded as the remote item `r` at `path`, when a stop
    /// came before its record (`ownUnrecorded`); nil otherwise. Not an item this device knows at
    /// another path: that is its upload moved away and back by another device (a move keeps
    /// the metadata, so the path it was written to matches again), which follows the move.
    ///
    /// Also when the upload's file is gone here since (deleted or renamed before the stop) and
    /// the remote's listing placed it again as a placeholder before its metadata was read
    /// (`placeBeforeMetadata`: the base then has the placeholder's own id, not the remote's).
    /// That placeholder is removed here (the caller holds the path's lock), so that the delete
    /// or the rename goes up.
    private func ownUnrecordedUpload(_ path: StorePath, _ r: RemoteItem, local: LocalItem?, base: BaseRow?) throws(DriveError) -> String? {
        let placedAgain = local.map { l in base.map { b in
            l.placeholder && b.remoteToken == r.version && b.localToken == l.token && b.id != r.meta.itemID
        } ?? false } ?? false
        guard let made = Self.ownUnrecorded(r, base: placedAgain ? nil : base, device: device.id),
              droppedBases.withLock({ $0[path] }) != made else { return nil }
        if let id = r.meta.itemID, try baseOfItem(id, elsewhereThan: path) != nil { return nil }
        if placedAgain, !removeUnchangedPlaceholder(path, of: r, localToken: base?.localToken ?? "") { return nil }
        return made
    }

    /// `RemoteMeta.origin` of an upload of the local version `token` to `path`: the token, a
    /// space, and 16 hex digits of the path's SHA-256 (S3 keeps 2 KB of metadata per object;
    /// a path may be longer).
    static func origin(_ token: String, at path: StorePath) -> String {
        token + " " + FolderRemote.hex(SHA256.hash(data: path.bytes)).prefix(16)
    }

    /// The local version that the remote file `r` was uploaded from, when this device wrote it
    /// at this path and its base does not say so: the device stopped (a crash, a full index
    /// disk) between the remote write and the base's write. That version is one this device
    /// has seen, not another device's change: a delete or a save made here since goes over
    /// it, and nothing comes back. Not when the file was moved or copied here (another device's
    /// move keeps the metadata, the path it was written to says so), nor when its size or time
    /// is not the uploaded one (a program that is not DocDrive editing a remote folder's file
    /// in place keeps its metadata, not its time).
    static func ownUnrecorded(_ r: RemoteItem, base: BaseRow?, device: String) -> String? {
        guard r.kind == .file, r.meta.deviceID == device, let o = r.meta.origin,
              r.version != base?.remoteToken else { return nil }
        let halves = o.split(separator: " ")
        guard halves.count == 2, o == origin(String(halves[0]), at: r.path) else { return nil }
        // "size:seconds.nanoseconds:inode" (FolderRemote.version)
        let parts = halves[0].split(separator: ":")
        guard parts.count == 3, Int64(parts[0]) == r.size else { return nil }
        let time = parts[1].split(separator: ".")
        guard time.count == 2, let sec = Int64(time[0]), let nsec = Int64(time[1]),
              r.meta.mtimeNanoseconds == Timestamp.nanoseconds(seconds: sec, nanoseconds: nsec) else { return nil }
        return String(halves[0])
    }

    /// Queues every path under the folder `path` (a folder just moved): each this device has a
    /// base for, and each there locally without one. A file made in the folder before it was
    /// renamed, whose sync ran under the old name once the rename had taken it away (rsync's
    /// new file, then `mv` of its folder), is known by no base and queued under no other name.
    private func requeueInside(_ path: StorePath) throws(DriveError) {
        var known = Set<StorePath>()
        var batch = [(String, StorePath, Double)]()
        for b in try bases.below(root: key, folder: path) {
            known.insert(b.path)
            batch.append((key, b.path, 0))
        }
        let cachefd = try openCache()
        defer { close(cachefd) }
        func walk(_ dfd: Int32, _ folder: StorePath) {
            for e in Beneath.names(dfd) ?? [] where !FolderRemote.isOwnName(e.name) {
                let rel = folder.appending(e.name)
                if !known.contains(rel) { batch.append((key, rel, 0)) }
                if e.type == UInt8(DT_DIR) || e.type == UInt8(DT_UNKNOWN), case .success(let sub) = Beneath.openFolder(dfd, [e.name[...]]) {
                    walk(sub, rel)
                    close(sub)
                }
            }
        }
        if case .success(let dir) = Beneath.openFolder(cachefd, path.names) {
            walk(dir, path)
            close(dir)
        }
        try queue.enqueueAll(batch)
    }

    /// Queues what is in the folder `path` locally (and on the remote) for a sync of its own.
    private func queueChildren(_ path: StorePath, remoteToo: Bool) throws(DriveError) {
        let cachefd = try openCache()
        defer { close(cachefd) }
        var batch = [(String, StorePath, Double)]()
        if case .success(let dir) = Beneath.openFolder(cachefd, path.names) {
            for e in Beneath.names(dir) ?? [] where !FolderRemote.isOwnName(e.name) { batch.append((key, path.appending(e.name), 0)) }
            close(dir)
        }
        let name = path.bytes.isEmpty ? 0 : path.bytes.count + 1
        for b in try bases.below(root: key, folder: path) where !b.path.bytes[name...].contains(UInt8(ascii: "/")) {
            batch.append((key, b.path, 0))
        }
        if remoteToo {
            for p in remoteIDs.withLock({ $0.inFolder(path) }) { batch.append((key, p, 0)) }
        }
        try queue.enqueueAll(batch)
    }

    /// Puts the remote version in place of the local one (or where there is none). The local
    /// copy must still be what the base says (or absent) and not open for writing; else the
    /// remote version becomes a conflict copy.
    private func download(_ r: RemoteItem, over local: LocalItem?, base: BaseRow?) throws(DriveError) {
        let cachefd = try openCache()
        defer { close(cachefd) }
        let dir = try openLocalFolder(cachefd, r.path.folder)
        defer { close(dir) }
        let name = r.path.lastName
        switch r.kind {
        case .folder:
            if Beneath.withCName(name, { mkdirat(dir, $0, mode_t(r.meta.mode ?? 0o755) & 0o7777) }) != 0, errno != EEXIST {
                throw DriveError.io("cannot make the folder \(r.path) in the local copy", .init(rawValue: errno))
            }
            guard let st = Beneath.stat(dir, name), st.st_mode & S_IFMT == S_IFDIR else {
                throw DriveError(.io, "\(r.path) is a file in the local copy where the remote has a folder.")
            }
            recordPlaced(dir, r.path, id: r.meta.itemID, replacing: nil)
            told(r.path)
            try bases.put(root: key, BaseRow(path: r.path, id: r.meta.itemID ?? localID(LocalItem(path: r.path, kind: .folder, st: st)),
                                             kind: .folder, localToken: "", remoteToken: r.version))
            try queueChildren(r.path, remoteToo: true)
            return
        case .symlink, .file:
            break
        }
        // On demand, a file comes down as a placeholder unless its content is here already (a
        // file filled before: kept filled), it is pinned, or there is nothing to fetch.
        let asPlaceholder = content == .onDemand && r.kind == .file && r.size > 0
            && (local == nil || local?.placeholder == true) && !isPinned(r.path)
        let tmp = asPlaceholder ? try placeholderFile(r) : try fetch(r)
        var placed = false
        defer {
            close(tmp.fd)
            if !placed { unlink(tmp.path) }
        }
        // The local copy is replaced only as the base knew it, under a writing intent (no
        // process holds a lock on it) and while no one has it open for writing.
        // Opened for writing: a writing intent takes a write lock, which needs it.
        let current = local.flatMap { l -> Int32? in
            l.kind == .file ? Self.openForIntent(dir, name) : nil
        }
        defer { if let current, current >= 0 { close(current) } }
        var placedToken: String?
        let place: () throws -> Void = { [self] in
            let now = Beneath.stat(dir, name)
            let unchanged: Bool = {
                guard let now else { return local == nil }
                // A placeholder is replaced whatever its time says (a fill cut short changed it).
                if now.st_mode & S_IFMT == S_IFREG, Placeholder.isPlaceholder(dir, name) { return true }
                guard let l = local, let b = base else { return false }
                return FolderRemote.version(now) == b.localToken && FolderRemote.version(now) == l.token
            }()
            guard unchanged, !isBusyLocally(local) else {
                throw DriveError(.remoteChanged, "\(r.path) changed here while the remote's version was downloaded.")
            }
            if tmp.item.kind == .symlink {
                var target = [UInt8](repeating: 0, count: Int(tmp.item.size) + 1)
                let n = target.withUnsafeMutableBytes { pread(tmp.fd, $0.baseAddress, $0.count, 0) }
                let linkTmp = Array((".docdrive-link-" + ItemIndex.newID()).utf8)
                let made = Beneath.withCName(target[0..<max(0, n)]) { t in Beneath.withCName(linkTmp) { symlinkat(t, dir, $0) } }
                guard made == 0 else { throw DriveError.io("cannot make the link \(r.path) in the local copy", .init(rawValue: errno)) }
                let moved = Beneath.withCName(linkTmp) { t in Beneath.withCName(name) { renameat(dir, t, dir, $0) } }
                if moved != 0 {
                    let e = errno
                    _ = Beneath.withCName(linkTmp) { unlinkat(dir, $0, 0) }
                    throw DriveError.io("cannot place the link \(r.path) in the local copy", .init(rawValue: e))
                }
            } else {
                // The base takes the placed file's own time and inode, from before it is in
                // place: a process may open it with O_TRUNC the moment it is (and write, and
                // close) before a stat by name would see it, and that change must go up.
                var st = stat()
                guard fstat(tmp.fd, &st) == 0 else { throw DriveError.io("cannot read the download of \(r.path)", .init(rawValue: errno)) }
                placedToken = FolderRemote.version(st)
                // Where nothing was, a file a process made meanwhile is not replaced.
                let flags: UInt32 = now == nil ? UInt32(dd_RENAME_NOREPLACE) : 0
                var moved: Int32 = -1
                var failure: Int32 = 0
                let free = unlessOpenForWriting(now) {
                    moved = Beneath.withCName(name) { dd_renameat2(AT_FDCWD, tmp.path, dir, $0, flags) }
                    failure = moved == 0 ? 0 : errno
                }
                guard free else {
                    throw DriveError(.remoteChanged, "\(r.path) was opened for writing here while the remote's version was downloaded.")
                }
                errno = failure
                if moved != 0, errno == EEXIST {
                    throw DriveError(.remoteChanged, "\(r.path) was made here while the remote's version was downloaded.")
                }
                guard moved == 0 else { throw DriveError.io("cannot place \(r.path) in the local copy", .init(rawValue: errno)) }
                placed = true
            }
            recordPlaced(dir, r.path, id: r.meta.itemID, replacing: now)
        }
        do {
            if let current, current >= 0 {
                try coordinator.coordinate([.init(fd: current, .writing)], timeout: 1.0, place)
            } else {
                try place()
            }
        } catch let e as DriveError where e.code == .busy || e.code == .remoteChanged {
            // Changed, locked or open here: both versions stay. This device has seen the remote
            // version; its own goes over it (and the remote's lives on as the copy).
            logger.info("store \(self.name): \(r.path) is not replaced here: \(e.message)")
            try keepAsConflict(tmp.fd, tmp.path, r, placed: &placed)
            if let l = local {
                try bases.put(root: key, BaseRow(path: r.path, id: base?.id ?? localID(l), kind: l.kind, localToken: "", remoteToken: r.version))
            }
            try? queue.enqueue(root: key, path: r.path, due: 0)
            return
        } catch let e as DriveError {
            throw e
        } catch {
            throw DriveError(.io, "\(error)")
        }
        told(r.path)
        // A conflict copy another device made is one here too (listed, status `conflict`). Its
        // name says whose version it holds (the device that uploaded it kept it).
        if let shown = r.path.string, let c = SyncDecision.conflictCopy(shown) {
            try? bases.addConflict(root: key, ConflictRecord(store: self.name, path: c.original, copy: shown,
                                                             device: c.device, time: Date().timeIntervalSince1970))
        }
        guard let now = Beneath.stat(dir, name), let kind = FolderRemote.kind(now) else { return }
        let id = r.meta.itemID ?? localID(LocalItem(path: r.path, kind: kind, st: now))
        try bases.put(root: key, BaseRow(path: r.path, id: id, kind: kind, localToken: placedToken ?? FolderRemote.version(now), remoteToken: r.version,
                                         parent: r.meta.parent))
        if kind == .file, let id { changes.publish(.arrived(root: key, path: r.path, id: id, downloaded: !asPlaceholder)) }
    }

    /// Both sides changed: the local copy stays (it is uploaded over the remote version next,
    /// now that this device has seen it) and the remote version is kept beside it as
    /// `NAME (conflict from DEVICE DATE).EXT`, which is synced like any new file.
    private func conflict(_ l: LocalItem, _ r: RemoteItem, base: BaseRow?) throws(DriveError) {
        if l.kind == .folder || r.kind == .folder {
            // A folder on one side, a file or link on the other: neither replaces the other.
            // What goes into the folder fails with a sentence naming the file in the way.
            if l.kind != r.kind {
                logger.warning("store \(name): \(l.path) is a \(l.kind) here and a \(r.kind) on the remote; neither replaces the other (rename one of them)")
            }
            return
        }
        let tmp = try fetch(r)
        var placed = false
        defer {
            close(tmp.fd)
            if !placed { unlink(tmp.path) }
        }
        // The same bytes on both sides (made on two devices, or the same change twice): agreed.
        if l.kind == .file, r.kind == .file, let cachefd = try? openCache() {
            defer { close(cachefd) }
            if case .success(let dir) = Beneath.openFolder(cachefd, l.path.folder.names) {
                defer { close(dir) }
                let fd = Beneath.openForReading(dir, l.path.lastName)
                if fd >= 0 {
                    defer { close(fd) }
                    var st = stat()
                    if fstat(fd, &st) == 0, FolderRemote.version(st) == l.token, Self.sameContent(fd, tmp.fd) {
                        if let rid = r.meta.itemID, rid != localID(l) { takeID(rid, for: l) }
                        try bases.put(root: key, BaseRow(path: l.path, id: r.meta.itemID ?? localID(l), kind: .file,
                                                         localToken: l.token, remoteToken: r.version, parent: r.meta.parent))
                        return
                    }
                }
            }
        }
        try keepAsConflict(tmp.fd, tmp.path, r, placed: &placed)
        // This device has now seen the remote version: the local one goes over it.
        try bases.put(root: key, BaseRow(path: l.path, id: localID(l), kind: l.kind, localToken: "", remoteToken: r.version))
        try? queue.enqueue(root: key, path: l.path, due: 0)
    }

    /// Places the downloaded remote version `r` beside the document as a conflict copy.
    private func keepAsConflict(_ fd: Int32, _ tmpPath: String, _ r: RemoteItem, placed: inout Bool) throws(DriveError) {
        let who = r.meta.deviceName ?? "another device"
        let cachefd = try openCache()
        defer { close(cachefd) }
        let dir = try openLocalFolder(cachefd, r.path.folder)
        defer { close(dir) }
        // A link's conflict copy is a small file holding its target. Two conflicts of one
        // document in the same second get " 2", " 3"... after the device's name.
        var copy = StorePath(SyncDecision.conflictPath(r.path.description, device: who, date: Date()))
        var n = 1
        while true {
            let moved = Beneath.withCName(copy.lastName) { dd_renameat2(AT_FDCWD, tmpPath, dir, $0, UInt32(dd_RENAME_NOREPLACE)) }
            if moved == 0 { break }
            guard errno == EEXIST, n < 100 else {
                throw DriveError.io("cannot keep the conflict copy \(copy) in the local copy", .init(rawValue: errno))
            }
            n += 1
            copy = StorePath(SyncDecision.conflictPath(r.path.description, device: "\(who) \(n)", date: Date()))
        }
        placed = true
        recordPlaced(dir, copy, id: nil, replacing: nil)
        told(copy)
        try bases.addConflict(root: key, ConflictRecord(store: name, path: r.path.description, copy: copy.description,
                                                        device: who, time: Date().timeIntervalSince1970))
        statusMarks.mark(root: key, path: r.path)
        logger.warning("store \(name): \(r.path) was changed here and on \(who); their version is kept as \(copy)")
        try? queue.enqueue(root: key, path: copy, due: 0)
    }

    /// Deleted here: delete on the remote what is still the version this device saw. A folder
    /// goes once what is in it went (a file changed or added in it elsewhere keeps it).
    private func deleteRemote(_ path: StorePath, base: BaseRow) throws(DriveError) -> SyncOutcome {
        if base.kind == .folder {
            let inside = try bases.below(root: key, folder: path)
                .sorted { $0.path.bytes.count > $1.path.bytes.count }
            // A child still waiting to be moved out (its new path's sync moves it, after a
            // rename of this folder) is not something new on the remote: the folder waits for
            // it rather than coming back (as in deleteLocal).
            var waiting = false
            for child in inside where try syncLockedChild(child.path) == .busy { waiting = true }
            if waiting { return .busy }
            do {
                try remote.delete(path, version: "")
            } catch let e where e.code == .remoteChanged {
                // Something new inside on the remote: the folder comes back here.
                if let r = try remote.item(at: path) { try download(r, over: nil, base: nil) }
                return .synced
            }
        } else {
            try remote.delete(path, version: base.remoteToken)
        }
        try bases.remove(root: key, path: path)
        return .removed
    }

    /// A path inside a folder being deleted (this worker holds the folder's lock).
    private func syncLockedChild(_ path: StorePath) throws(DriveError) -> SyncOutcome {
        var attempt = 0
        while true {
            do { return try syncOnce(path) } catch let e where e.code == .remoteChanged && attempt < 3 { attempt += 1 }
        }
    }

    /// Deleted on the remote, unchanged here: delete the local copy (under a writing intent).
    /// A folder goes once what is in it went; a new file in it keeps it, and it goes back up.
    private func deleteLocal(_ l: LocalItem, base: BaseRow) throws(DriveError) -> SyncOutcome {
        let cachefd = try openCache()
        defer { close(cachefd) }
        guard case .success(let dir) = Beneath.openFolder(cachefd, l.path.folder.names) else { return .removed }
        defer { close(dir) }
        let name = l.path.lastName
        if l.kind == .folder {
            if case .success(let sub) = Beneath.openFolder(dir, [name]) {
                let children = (Beneath.names(sub) ?? []).map { l.path.appending($0.name) }
                close(sub)
                // A child another worker holds (it is being moved out by the sync of its new
                // path) is not a new file: the folder waits for it rather than coming back.
                var waiting = false
                for child in children where try syncLockedChild(child) == .busy { waiting = true }
                if waiting { return .busy }
            }
            if Beneath.withCName(name, { unlinkat(dir, $0, dd_AT_REMOVEDIR) }) != 0 {
                if errno == ENOTEMPTY || errno == EEXIST {
                    // A file made here inside it: the folder stays, and goes back to the remote.
                    logger.info("store \(self.name): \(l.path) was deleted on the remote, but something new is in it here; it stays, and goes back to the remote")
                    var m = meta(id: base.id)
                    m.mode = UInt32(l.st.st_mode & 0o7777)
                    let r = try remote.makeFolder(l.path, meta: m)
                    try bases.put(root: key, BaseRow(path: l.path, id: base.id, kind: .folder, localToken: "", remoteToken: r.version))
                    return .synced
                }
                if errno != ENOENT { throw DriveError.io("cannot remove \(l.path) from the local copy", .init(rawValue: errno)) }
            }
        } else {
            let fd = l.kind == .file ? Self.openForIntent(dir, name) : -1
            defer { if fd >= 0 { close(fd) } }
            let remove: () throws -> Void = { [self] in
                guard let now = Beneath.stat(dir, name), FolderRemote.version(now) == base.localToken, !isBusyLocally(l) else {
                    throw DriveError(.remoteChanged, "\(l.path) changed here; it is not deleted.")
                }
                var removed: Int32 = -1
                var failure: Int32 = 0
                var keptAt: String?
                // A file with content is kept a while (RecentlyDeleted); a placeholder, a link or
                // an empty file holds nothing the remote did not, and goes.
                let keeps = now.st_mode & S_IFMT == S_IFREG && now.st_size > 0 && !l.placeholder
                guard unlessOpenForWriting(now, {
                    if keeps, let at = recentlyDeleted.keep(dir, name, as: l.path) {
                        keptAt = at
                        removed = 0
                        return
                    }
                    if keeps { logger.warning("store \(self.name): \(l.path) cannot be kept in \(recentlyDeleted.folder) (\(String(cString: strerror(errno)))); it is removed") }
                    removed = Beneath.withCName(name) { unlinkat(dir, $0, 0) }
                    failure = removed == 0 ? 0 : errno
                }) else {
                    throw DriveError(.remoteChanged, "\(l.path) was opened for writing here; it is not deleted.")
                }
                guard removed == 0 || failure == ENOENT else {
                    throw DriveError.io("cannot remove \(l.path) from the local copy", .init(rawValue: failure))
                }
                if let keptAt {
                    logger.info("store \(self.name): \(l.path) was deleted on \(remote.displayName); kept for \(RecentlyDeleted.keepDays) days in \(recentlyDeleted.folder)/\(keptAt)")
                    recentlyDeleted.sweep()
                }
            }
            do {
                if fd >= 0 { try coordinator.coordinate([.init(fd: fd, .writing)], timeout: 1.0, remove) } else { try remove() }
            } catch let e as DriveError where e.code == .busy || e.code == .remoteChanged {
                // In use or changed here: the change wins; it goes back up as a new file.
                try bases.remove(root: key, path: l.path)
                try? queue.enqueue(root: key, path: l.path, due: 0)
                return .synced
            } catch let e as DriveError {
                throw e
            } catch {
                throw DriveError(.io, "\(error)")
            }
        }
        index.record(.removed(root: key, ino: Int64(l.st.st_ino)))
        told(l.path)
        try bases.remove(root: key, path: l.path)
        return .removed
    }

    /// Moves a local item (a rename made on another device), making the new folders.
    private func moveLocal(_ from: StorePath, to: StorePath) throws(DriveError) {
        let cachefd = try openCache()
        defer { close(cachefd) }
        guard case .success(let src) = Beneath.openFolder(cachefd, from.folder.names) else { return }
        defer { close(src) }
        let dst = try openLocalFolder(cachefd, to.folder)
        defer { close(dst) }
        let r = Beneath.withCName(from.lastName) { f in Beneath.withCName(to.lastName) { dd_renameat2(src, f, dst, $0, UInt32(dd_RENAME_NOREPLACE)) } }
        guard r == 0 else { throw DriveError.io("cannot move \(from) to \(to) in the local copy", .init(rawValue: errno)) }
        if let st = Beneath.stat(dst, to.lastName) {
            var pst = stat()
            if fstat(dst, &pst) == 0 {
                index.record(.renamed(root: key, ino: Int64(st.st_ino), parentIno: Int64(pst.st_ino), name: String(decoding: to.lastName, as: UTF8.self)))
            }
        }
        told(from)
        told(to)
    }

    // MARK: looking at both sides

    /// Lists the remote and queues every path where it differs from the bases (changed, new,
    /// gone, moved). A remote that cannot be listed changes nothing: the store is offline.
    @discardableResult
    func poll() -> Int { finishPoll(startPoll(placingEarly: false)) }

    /// A poll begun: the remote's first listing step (RemoteListing), and the placeholders
    /// made from it.
    /// `finishPoll` takes what it holds (once): the first poll's start is held by the poller
    /// thread for as long as it runs, and must not keep a listing of every item (a store of
    /// 100,000: about 40 MB) for the life of the mount.
    final class PollStart: Sendable {
        private let held: Mutex<(listing: Result<RemoteListing, DriveError>, early: Set<StorePath>)?>
        /// Whether placeholders were made before the metadata was read.
        let placedEarly: Bool
        /// How many items the rest of the poll looks up (S3: a HEAD each) before it compares.
        let lookups: Int
        /// The remote's fingerprint taken before the listing (nil: the remote has none).
        let fingerprint: [UInt8]?
        /// The fingerprint and the bases were those of the last poll that found nothing: there
        /// is no listing, and nothing to compare.
        let unchanged: Bool

        fileprivate init(listing: Result<RemoteListing, DriveError>, early: Set<StorePath>, fingerprint: [UInt8]? = nil) {
            lookups = (try? listing.get().pending.count) ?? 0
            held = Mutex((listing, early))
            placedEarly = !early.isEmpty
            self.fingerprint = fingerprint
            unchanged = false
        }

        fileprivate init(unchangedAt fingerprint: [UInt8]) {
            lookups = 0
            held = Mutex(nil)
            placedEarly = false
            self.fingerprint = fingerprint
            unchanged = true
        }

        fileprivate func take() -> (listing: Result<RemoteListing, DriveError>, early: Set<StorePath>)? {
            held.withLock { h in
                defer { h = nil }
                return h
            }
        }
    }

    /// The first step of a poll: the listing alone (S3: the keys, without a HEAD each). With
    /// `placingEarly` (the first poll at the mount), on demand, what is new on the remote (a
    /// store just joined: all of it) shows at once, as placeholders, before each item's
    /// metadata is read (`placeBeforeMetadata`): the daemon mounts after this step, and
    /// `finishPoll` does the rest. (A later poll places what is new with its metadata read:
    /// a few items, and nobody waits for it.)
    func startPoll(placingEarly: Bool) -> PollStart {
        pollsStarted.add(1, ordering: .relaxed)
        do {
            guard placingEarly, content == .onDemand else {
                let fingerprint = try remote.fingerprint()
                let generation = bases.generation
                if let fingerprint, quiet.withLock({ q in
                    guard let r = q, r.fingerprint == fingerprint, r.bases == generation, r.row < Self.quietPollsInARow else { return false }
                    q?.row += 1
                    return true
                }) {
                    return PollStart(unchangedAt: fingerprint)
                }
                return PollStart(listing: .success(noteUnshown(try remote.listQuickly())), early: [], fingerprint: fingerprint)
            }
            if (try? bases.count(root: key)) == 0 {
                // Nothing known here yet (a store just joined): every item is new, and each
                // part of the listing becomes placeholders while the next one comes.
                var early = Set<StorePath>()
                var shown = 0
                let listing = try remote.listQuickly { items, pending in
                    let new = items.filter { $0.kind == .folder || $0.kind == .file && $0.size > 0 }
                    guard !new.isEmpty else { return }
                    let placed = placeNewPlaceholders(new, pending: pending, logging: false)
                    shown += placed.count
                    early.formUnion(placed.intersection(pending))
                }
                noteUnshown(listing)
                if shown > 0 { logger.info("store \(name): \(shown) new items of the remote shown here (files as placeholders)") }
                if !early.isEmpty { logger.info("store \(name): \(early.count) items placed before their metadata was read") }
                return PollStart(listing: .success(listing), early: early)
            }
            let listing = noteUnshown(try remote.listQuickly())
            let early = listing.pending.isEmpty ? [] : placeBeforeMetadata(listing)
            return PollStart(listing: .success(listing), early: early)
        } catch {
            return PollStart(listing: .failure(error), early: [])
        }
    }

    /// Logs the objects a listing leaves unshown, once each time their number changes.
    @discardableResult
    private func noteUnshown(_ listing: RemoteListing) -> RemoteListing {
        let n = listing.unshownCount
        guard unshownLogged.exchange(n, ordering: .relaxed) != n, n > 0 else { return listing }
        let some = listing.unshown.map { "\"" + $0.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? "\\u{\(String($0.value, radix: 16))}" : String($0) }.joined() + "\"" }
        logger.warning("store \(name): \(n) object\(n == 1 ? "" : "s") on \(remote.displayName) \(n == 1 ? "has a name" : "have names") with a control character that another tool wrote as it is (\(some.joined(separator: ", "))\(n > some.count ? ", ..." : "")); DocDrive writes such names escaped, so \(n == 1 ? "it is" : "they are") not shown here and left on the remote untouched (rename \(n == 1 ? "it" : "them") there to show \(n == 1 ? "it" : "them"))")
        return listing
    }

    /// The rest of a poll begun by `startPoll` (polls run one at a time: one poll's two steps
    /// are never apart by another poll).
    ///
    /// Memory: a store of 100,000 items is compared with its bases without a map of each side.
    /// The items are indexed by path (their place in the listing) and by id (the items' own
    /// strings), and the bases are read one row at a time (`BaseVersions.forEach`), each
    /// compared with its item as it comes; what is left is a mark per item.
    @discardableResult
    func finishPoll(_ start: PollStart) -> Int {
        defer { polls.add(1, ordering: .relaxed) }
        if start.unchanged {
            quietPolls.add(1, ordering: .relaxed)
            state.withLock { s in
                s.lastPoll = Date().timeIntervalSince1970
                s.polls = (s.polls ?? 0) + 1
            }
            return 0
        }
        // Kept again below only if this poll finds nothing to do.
        quiet.withLock { $0 = nil }
        let items: [RemoteItem]
        let early: Set<StorePath>
        do {
            guard let (listed, placed) = start.take() else { return 0 }
            early = placed
            items = try remote.complete((consume listed).get())  // the listing's items completed in place
        } catch {
            let now = Date().timeIntervalSince1970
            let wasOnline = state.withLock { s -> Bool in
                let was = s.offlineSince == nil
                if was { s.offlineSince = now }
                s.offlineReason = error.message
                return was
            }
            if wasOnline { logger.warning("store \(name): offline: \(error.message)") }
            return 0
        }
        var at = [StorePath: Int](minimumCapacity: items.count)
        var byID = [String: StorePath]()
        var several = [String: [RemoteItem]]()
        for (k, i) in items.enumerated() {
            at[i.path] = k
            if let id = i.meta.itemID {
                if let first = byID[id], let f = at[first].map({ items[$0] }), f.kind != .folder, i.kind != .folder {
                    several[id, default: [f]].append(i)
                }
                byID[id] = i.path
            }
        }
        if !early.isEmpty { completePlaceholders(early, items, at: at) }
        let wasOffline = state.withLock { s -> Bool in
            let was = s.offlineSince != nil
            s.offlineSince = nil
            s.offlineReason = nil
            s.lastPoll = Date().timeIntervalSince1970
            s.polls = (s.polls ?? 0) + 1
            s.devices = RemoteState.deviceNames(items.lazy.map(\.meta))  // no copy of every item's metadata
            return was
        }
        if wasOffline {
            logger.info("store \(name): the remote answers again")
            _ = try? queue.makeDue(.all, root: key)
        }
        remoteIDs.withLock { $0 = ListedIDs(byID: byID) }  // kept: the ids in 16 bytes each, not the listing's strings
        listedCreates(items, at: at, done: polls.load(ordering: .relaxed))
        let healed = healDuplicateIDs(several, now: Date().timeIntervalSince1970)
        listed.withLock { $0 = Set(items.map(\.path.hashValue)) }
        var changed = Set<StorePath>()
        // Per item: whether a base has its path; the ids of the items that a base has too.
        var known = [Bool](repeating: false, count: items.count)
        var knownIDs = Set<String>()
        let basesRead = bases.generation
        let compared: Void? = try? bases.forEach(root: key) { b in
            if let id = b.id, let p = byID[id], let k = at[p], let rid = items[k].meta.itemID { knownIDs.insert(rid) }
            if let k = at[b.path] {
                known[k] = true
                let r = items[k]
                // Another item id with the same version: another item with the same bytes (S3's
                // version is the content's MD5), whose id this device must take.
                if r.version != b.remoteToken || r.kind != b.kind || r.meta.itemID.map({ $0 != b.id }) ?? false { changed.insert(b.path) }
                // Its id now elsewhere only (an id healed at this path, `healDuplicateIDs`): the
                // item there takes it here too (a download of this one may have taken it).
                if let id = b.id, r.meta.itemID != id, let p = byID[id], p != b.path { changed.insert(p) }
            } else {
                changed.insert(b.path)
                if let id = b.id, let to = byID[id] { changed.insert(to) }
            }
        }
        guard compared != nil else { return 0 }
        for k in items.indices where !known[k] { changed.insert(items[k].path) }
        changed.formUnion(healed)
        // On demand, the files that are new here (a store just joined: all of them) become
        // placeholders at once, without a decision each.
        var placedNew = false
        if content == .onDemand {
            let new = items.indices.compactMap { k -> RemoteItem? in
                let i = items[k]
                // (This device's own upload that a stop kept from its record is decided instead.)
                guard (i.kind == .folder || i.kind == .file && i.size > 0) && !known[k]
                        && !(i.meta.itemID.map { knownIDs.contains($0) } ?? false)
                        && Self.ownUnrecorded(i, base: nil, device: device.id) == nil else { return nil }
                return i
            }
            if !new.isEmpty {
                changed.subtract(placeNewPlaceholders(new))
                placedNew = true
            }
        }
        let now = Date().timeIntervalSince1970
        // Folders first: a new folder is made before what goes in it.
        let batch = changed.sorted { $0.bytes.count < $1.bytes.count }.map { (key, $0, now) }
        try? queue.enqueueAll(batch, keepingRetries: true)
        if let fingerprint = start.fingerprint, batch.isEmpty, !placedNew, several.isEmpty, early.isEmpty, !wasOffline {
            quiet.withLock { $0 = (fingerprint, basesRead, 0) }
        }
        return batch.count
    }

    /// One item id at several paths on the remote: two devices' changes crossed where the
    /// remote has no transaction over two keys (S3: one device moved a file by a new upload
    /// under its new name while another wrote its change at the old one). Every path but the
    /// first (in byte order) becomes an item of its own, with an id derived from the old id and
    /// its path, so that devices that heal at once write the same. Only ids listed at the same
    /// paths for `duplicateGrace` seconds (a move between its copy and its delete is not
    /// healed). Returns the paths to decide again (each device then takes the new id).
    private func healDuplicateIDs(_ found: [String: [RemoteItem]], now: Double) -> [StorePath] {
        let due = duplicateIDs.withLock { seen -> [(String, [RemoteItem])] in
            var due = [(String, [RemoteItem])]()
            var next = [String: (paths: [StorePath], since: Double)]()
            for (id, items) in found {
                let paths = items.map(\.path).sorted { $0.bytes.lexicographicallyPrecedes($1.bytes) }
                if let s = seen[id], s.paths == paths {
                    next[id] = s
                    if now - s.since >= DuplicateIDs.grace { due.append((id, items)) }
                } else {
                    next[id] = (paths, now)
                }
            }
            seen = next
            return due
        }
        var healed = [StorePath]()
        for (id, items) in due {
            let sorted = items.sorted { $0.path.bytes.lexicographicallyPrecedes($1.path.bytes) }
            for r in sorted.dropFirst() {
                // A path syncing now is healed at a later listing.
                guard tryLock([r.path]) else { continue }
                defer { unlock([r.path]) }
                var m = r.meta
                m.itemID = DuplicateIDs.derived(id, at: r.path)
                do {
                    _ = try remote.reassign(r.path, version: r.version, meta: m)
                    logger.info("store \(name): \(r.path) had the item id of \(sorted[0].path) on the remote (two devices' changes crossed); it is an item of its own now")
                    // Both paths are decided again: the first keeps the id here too (a download
                    // of the other may have taken it on this device).
                    healed += [r.path, sorted[0].path]
                } catch {
                    logger.debug("store \(name): \(r.path) keeps the item id of \(sorted[0].path) for now: \(error.message)")
                }
            }
        }
        if !healed.isEmpty { duplicateIDs.withLock { s in for p in healed { s = s.filter { !$0.value.paths.contains(p) } } } }
        return healed
    }

    /// At start: queues every local path that differs from its base (saved while not mounted,
    /// or a save a crash kept out of the queue), and every base whose local copy is gone.
    /// `docdrive sync` runs it too, with `unexpected`: then only the paths it says yes to (those
    /// with nothing waiting) are queued, each after a second look at its base (the one read at
    /// the start may be older than an upload that ended during the walk), and a folder without
    /// a base is left to its files' uploads (it is made on the remote with the first). Returns
    /// how many paths were queued. The local copy is walked in the bases' order (PathOrderWalk,
    /// BasesInOrder): no map of every base is held.
    @discardableResult
    func compareLocal(unexpected: ((StorePath) -> Bool)? = nil, stopped: () -> Bool) -> Int {
        var queued = 0
        func enqueue(_ batch: [(String, StorePath, Double)]) {
            let wanted = unexpected.map { f in batch.filter { f($0.1) && differsStill($0.1) } } ?? batch
            if (try? queue.enqueueAll(wanted)) != nil { queued += wanted.count }
        }
        /// Whether `path` still differs from its base, both read now.
        func differsStill(_ path: StorePath) -> Bool {
            let local: LocalItem?
            do { local = try localItem(path) } catch { return true }  // unreadable or a fifo: its sync says so
            guard let base = try? bases.base(root: key, path: path) else {
                // No base: a file (or link) is new here; a folder follows its files.
                return local.map { $0.kind != .folder } ?? false
            }
            guard let local else { return true }  // gone here
            return base.localToken != FolderRemote.version(local.st) && !(base.kind == .file && local.placeholder)
        }
        guard let cachefd = try? openCache() else { return 0 }
        defer { close(cachefd) }
        // The walk visits the paths in the order of their bytes, the bases' order, and meets
        // each base once: one cursor for the paths stored as text, one for the others.
        var texts = BasesInOrder(bases, root: key, utf8: true)
        var others = BasesInOrder(bases, root: key, utf8: false)
        var batch = [(String, StorePath, Double)]()
        let now = Date().timeIntervalSince1970
        func add(_ path: StorePath) {
            batch.append((key, path, now))
            if batch.count >= 1000 {
                enqueue(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        // Fills the daemon before this one left waiting (FillCommits.swift): found in this walk.
        let fillsLeft = fills.leftByAStop
        func compare(_ step: PathOrderWalk.Step) throws(DriveError) {
            // A name that is not an item (a fifo, gone): its base, if any, is passed and queued.
            guard let st = Beneath.stat(step.dir, step.name[...]), FolderRemote.kind(st) != nil else { return }
            let b = step.utf8 ? try texts.take(step.path, passed: { add($0.path) }) : try others.take(step.path, passed: { add($0.path) })
            if let b, b.localToken == FolderRemote.version(st) {
                // unchanged since this device and the remote agreed
                if fillsLeft, st.st_mode & S_IFMT == S_IFREG { commitLeftFill(step.dir, step.name[...]) }
            } else if let b, b.kind == .file, st.st_mode & S_IFMT == S_IFREG, Placeholder.isPlaceholder(step.dir, step.name[...]) {
                // A placeholder the base knows holds nothing of the user's, whatever its
                // time says (a fill a crash cut short changed it): nothing to compare.
            } else {
                add(step.path)
            }
        }
        do throws(DriveError) {
            try PathOrderWalk.walk(cachefd, .store, skip: { FolderRemote.isOwnName($0) }, stopped: stopped, visit: compare)
            // The bases the walk did not meet: gone here (not known after a stop cut it short).
            while !stopped(), let b = try texts.next() { add(b.path) }
            while !stopped(), let b = try others.next() { add(b.path) }
        } catch {
            logger.warning("store \(name): the local copy could not be compared with the records: \(error.message)")
        }
        enqueue(batch)
        if fillsLeft, !stopped() {
            let n = fills.waiting
            fills.commitNow()
            logger.info("store \(name): \(n) downloaded file\(n == 1 ? "" : "s") the last run left waiting for the disk written out")
        }
        return queued
    }

    /// The file `name` in `dir`, when it carries a "filled" mark of this boot, goes to the
    /// fills to commit.
    private func commitLeftFill(_ dir: Int32, _ name: ArraySlice<UInt8>) {
        let fd = Beneath.withCName(name) { openat(dir, $0, O_RDONLY | dd_O_NOFOLLOW | dd_O_CLOEXEC | O_NONBLOCK) }
        guard fd >= 0 else { return }
        defer { close(fd) }
        var st = stat()
        guard let raw = Placeholder.rawMark(openFD: fd), case .filled = Placeholder.mark(raw: raw, boot: Placeholder.thisBoot),
              fstat(fd, &st) == 0 else { return }
        if !fills.add(fd: fd, st: st, mark: raw, times: nil) { _ = fills.settle(fd: fd, times: nil) }
    }

    /// Removes the downloads a crash interrupted (call before any worker of the store runs).
    func removeStaleDownloads() {
        guard var names = try? FileManager.default.contentsOfDirectory(atPath: downloads) else { return }
        // The placing folders' files too (placeholders being made), and the folders.
        var folders = [String]()
        for n in names where n.hasPrefix(Self.placingPrefix) {
            let sub = (try? FileManager.default.contentsOfDirectory(atPath: downloads + "/" + n)) ?? []
            names.append(contentsOf: sub.map { n + "/" + $0 })
            folders.append(n)
        }
        for n in names { unlink(downloads + "/" + n) }
        for f in folders { rmdir(downloads + "/" + f) }
        let files = names.count - folders.count
        if files > 0 { logger.info("store \(name): removed \(files) unfinished downloads left by a crash") }
    }

    /// The downloads folder's folder for the placing thread `k` (`makeTemporary(in:)`).
    static let placingPrefix = "placing-"
    static func placingFolder(_ k: Int) -> String { placingPrefix + String(k) }

    /// Conflict copies the user removed or renamed: their conflict is over.
    func clearResolvedConflicts() {
        guard let list = try? bases.conflicts(root: key) else { return }
        for (_, c) in list where (try? localItem(StorePath(c.copy))) ?? nil == nil {
            try? bases.removeConflict(root: key, copy: c.copy)
        }
    }
}

/// One item id at several paths of a remote (`StoreSync.healDuplicateIDs`).
public enum DuplicateIDs {
    /// How long one id must stay at the same paths before it is healed: longer than a move
    /// of this or another device takes between its copy and its delete (S3).
    public static let grace = 2.0

    /// The id an item at `path` takes when it must stop sharing `id`: the same on every device
    /// (a UUID made from a SHA-256 of both, version 8).
    public static func derived(_ id: String, at path: StorePath) -> String {
        var h = SHA256()
        h.update(data: Array("docdrive-item-id".utf8) + [0] + Array(id.utf8) + [0] + path.bytes)
        var b = Array(h.finalize().prefix(16))
        b[6] = (b[6] & 0x0F) | 0x80
        b[8] = (b[8] & 0x3F) | 0x80
        var out = ""
        for (i, byte) in b.enumerated() {
            if i == 4 || i == 6 || i == 8 || i == 10 { out += "-" }
            let hex = String(byte, radix: 16)
            out += hex.count == 1 ? "0" + hex : hex
        }
        return out
    }
}
