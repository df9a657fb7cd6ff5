// FileSystem: the drive's POSIX operations over backing folders, by descriptor; no FUSE in here.
import CDocDriveSys
import Foundation
import Logging
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// Who is asking: the kernel's view of the calling process.
public struct Caller: Sendable {
    public var uid: uid_t
    public var gid: gid_t
    public var pid: pid_t
    /// The caller's umask, when the kernel leaves it to us (FUSE_CAP_DONT_MASK): applied by the
    /// backing filesystem itself, so that a folder's default ACL overrides it as natively.
    /// nil: the mode is used as given.
    public var umask: mode_t?
    public init(uid: uid_t, gid: gid_t, pid: pid_t, umask: mode_t? = nil) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.umask = umask
    }
}

/// A node and its attributes, as returned by lookup and the create operations.
public struct NodeEntry {
    public let inode: Inode
    public var attr: stat
}

/// Which attributes a setattr changes.
public struct AttributeChanges: Sendable {
    public enum Time: Sendable {
        case now
        case at(timespec)
    }
    public var mode: mode_t?
    public var uid: uid_t?
    public var gid: gid_t?
    public var size: Int64?
    public var atime: Time?
    public var mtime: Time?
    /// The kernel asks the drive to drop setuid/setgid with this size change (a caller without
    /// CAP_FSETID truncates; FUSE_HANDLE_KILLPRIV_V2, see `dropsSetIDBits`).
    public var killsSetID = false
    public init() {}
}

/// An open backing file; the adapter keeps it in the FUSE file handle.
public final class OpenFile: Sendable {
    public let fd: Int32
    public let inode: Inode
    /// Where the content lives: the node's root, or a reference's store (uploads go there).
    let contentRoot: BackingRoot?
    /// The caller asked for O_DIRECT (the kernel then sends this handle's I/O straight to us).
    public let directIO: Bool
    /// The page cache still holds this content: the kernel need not drop it at open.
    public let keepCache: Bool
    /// Written since the last save was noted (set by every write, taken at close and fsync).
    let dirty = Atomic<Bool>(false)
    /// Opened for writing (O_WRONLY or O_RDWR).
    public let writable: Bool
    /// Opened for reading too: only such a file can be mapped shared and writable, so only
    /// its mapping can change it after its last close.
    let readable: Bool
    /// The kernel writes this file's backing file itself (FUSE passthrough): its writes never
    /// reach `write`, so a save is noticed by the file's version changing (`noticeBypassedWrites`).
    let writesBypass = Atomic<Bool>(false)
    /// The file's version when it was opened, then when last checked. Lock: leaf.
    let seenVersion: Mutex<FileVersion?>
    /// The kernel sends no FLUSH at its closes (FOPEN_NOFLUSH): what a close notes, the last
    /// close's RELEASE notes, and the POSIX locks last taken through it go then too (the lock
    /// table drops an owner's locks with the open file its last request came through). Only a
    /// file that CREATE has just made is opened so (`create(noFlush:)`): nobody else has it open
    /// through the mount, so no lock on it can be another descriptor's.
    public let noFlush: Bool
    /// A POSIX lock was taken through this `noFlush` file (counted in `noFlushLockHolders`).
    let tookLocks = Atomic<Bool>(false)

    init(fd: Int32, inode: Inode, flags: Int32, version: FileVersion?, directIO: Bool, keepCache: Bool,
         contentRoot: BackingRoot? = nil, noFlush: Bool = false) {
        self.noFlush = noFlush
        self.fd = fd
        self.inode = inode
        self.contentRoot = contentRoot ?? inode.root
        self.directIO = directIO
        self.keepCache = keepCache
        self.writable = flags & O_ACCMODE != O_RDONLY
        self.readable = flags & O_ACCMODE != O_WRONLY
        inode.noteOpened()
        OpenFiles.shared.opened(inode, writable: writable)
        self.seenVersion = Mutex(version)
    }

    deinit {
        OpenFiles.shared.closed(inode, writable: writable)
        inode.noteClosed()
    }
}

/// Tunables that the adapter passes on to the kernel.
public struct FileSystemOptions: Sendable {
    public var entryTimeout: Double = 1.0
    public var attrTimeout: Double = 1.0
    /// For nodes whose backing folder is watched (FileSystem+KernelCache): the kernel hears of
    /// every change there, and keeps their entries and attributes this long.
    public var keptTimeout: Double = 60.0
    /// The kernel caches writes; it may read a write-only file and handles O_APPEND itself.
    /// Off by default: with it the kernel trusts its own size and mtime of a cached file for
    /// ever, so a change made in a backing folder (by a sync, another program) would never show
    /// in the mount, and SEEK_DATA/SEEK_HOLE would miss data still in the page cache.
    public var writebackCache: Bool = false
    /// How reads move access times (the mount's atime options).
    public var accessTimes = AccessTimes()
    public init() {}
}

/// The drive as a file system. Thread-safe: FUSE calls arrive on many threads at once.
///
/// Lock order of the core (outer before inner; a lock not named as outer is a leaf, held for
/// dictionary or flag work only, and nothing else is taken while it is held):
///
/// 1. `DirectoryStream.state` (one per open folder; the kernel already serialises readdir per
///    open folder) is held across readdir/seekdir of its own stream and, for READDIRPLUS,
///    across the lookups of the entries, so it comes before 3 and 4.
/// 2. `ItemIndex.writeLock` before `ItemIndex.pending` (a batch is taken, then written).
/// 3. An `InodeTable` shard's `state` (its part of the nodes: by backing identity, by id with
///    lookup counts, the remembered ones) is a leaf to everything but 1, one shard at a time:
///    no system call under it; descriptors close after it is dropped. Finding a node by id
///    (every request) and by backing file (LOOKUP, CREATE) take the same one shard.
/// 4. `Inode.slot` is a leaf (it also guards the node's versions: `cachedVersion`,
///    `fsyncedVersion`, `listedVersion`); an `acquire` that must open a lazy node takes the
///    parent's slot first and its own afterwards, never both at once.
/// 5. A `LockTable` shard's `state` (the locks of the backing files that fall in it; one held
///    at a time) is a leaf held across the non-blocking F_OFD_SETLK/F_OFD_GETLK and the
///    close of its owners' backing descriptors (never a waiting call), so that the backing
///    file's locks and the table change together.
/// 6. Leaves: `ReferenceLink.targets`, `VacatedNames.entries`, `FolderPathCache.entries`,
///    `Coordinator.held`, `grantSet`, `appViews`, `invalidation`, `releaseBarrier`,
///    `Namespace.layout/roots`, `OpenFile.seenVersion`, an `OpenFiles` shard (a sync worker holds
///    it across one rename or unlink in the local copy, `unlessOpenForWriting`), the uploader's `stores` copies (one at a time), `noted`,
///    `inFlight`, `remotesDown`, `compareScheduled`, `published`, `Downloads.table` (taken
///    on a request thread by an open of a placeholder, which only queues its download, and by
///    an O_TRUNC open or a truncate of a placeholder, `takePlaceholder`, released before its
///    body runs; no job, waiter or thread start runs under it, only an ending thread's rename), `FilledTimes`' shards (`Shard.files`), each
///    store's `Readahead.state`, `StatusMarks.marked` (the status socket's marks), a poll's
///    `StoreSync.PollStart.held` (taken once, by `finishPoll`), `KernelCacheWatch.state` (held
///    across inotify_add_watch and inotify_rm_watch only). `BaseVersions.forEach` runs
///    its body inside an index read: the sync's bodies take no lock and use no index there.
///    A store's `FillCommits.state` (fills waiting to be written out) is a leaf too, which
///    also makes or removes the store's `fills-waiting` marker file (once per burst).
///    `IndexReaders.idle` (a read-only connection is popped or pushed, the read runs after) and
///    `ItemIndex.idRandomness` (two loads of random words) are leaves.
///    `DeferredFrees.state` (descriptors of removed files waiting to be closed) is a leaf: the
///    frees thread closes them with no lock held, and `statfs` waits for them holding none.
/// 6a. A store's `FillCommits.transitions` (a file's "filled" mark going, or an eviction's
///    mark) is held across that file's fgetxattr, fremovexattr and fstat, never across a
///    sync of the disk, and comes before `FilledTimes`' shards. A writable open of a file
///    filled in this boot takes it on a request thread (`settleFill`, after the file's fsync).
/// 7. In the adapter, a `Passthrough` shard's `nodes` (one at a time) is held across the
///    backing-id ioctl and the taking of the node's content path (`Inode.acquire`, which takes
///    `Inode.slot`, 4, and may reopen the file), so it comes before 4 and its leaves; no other
///    lock of the adapter or the core is taken under it. `FuseContext.session` is a leaf, never
///    held across a notification (`FuseContext.notify`). fuse_lowlevel_notify_inval_entry waits
///    for the kernel's lock of that folder, so it is never sent from a request thread of a
///    folder the kernel holds (control-socket commands and `invalidateLater` use other
///    threads); request threads send only inode invalidations. The sync's workers do not wait
///    for theirs either (`invalidateLater`: a request may hold the folder while it waits for a
///    worker). (Until 2026-11-26 a worker sent its own, holding the lock: the randomized
///    three-device test hung a mount with a worker waiting in fuse_reverse_inval_entry.)
///    The kernel cache's watch thread (FileSystem+KernelCache) sends entry and inode
///    invalidations holding no lock, and no request waits for that thread.
///    `QueuedReleases.serial` (one release barrier at a time, FileSystem+Releases) is held
///    across the barrier's open and close of the mount's root and its wait, and only
///    `QueuedReleases.state` (a leaf) is taken under it; no lock of the core is held when a
///    barrier starts (a request thread starts one for a lock conflict or a status attribute,
///    and waits for other workers, never for itself). `UnreleasedFiles`' shards are leaves.
///
/// 8. The change feed (ChangeFeed) runs its subscribers on the operation's thread after the
///    operation's system calls, with no lock of the core held; each subscriber takes leaves
///    only (an `InodeTable` shard, `ItemIndex.pending`, the uploader's `noted`).
///
/// Never on a FUSE request thread: a wait for an index transaction (the index answers from
/// its unwritten events, see `ItemIndex`), for the network, or for an upload.
public final class DriveFileSystem: Sendable {
    public let home: DriveHome
    public let options: FileSystemOptions
    let namespace: Namespace
    let table = InodeTable()
    public let index: ItemIndex
    /// Uploads what is saved in stores; nil when nothing is uploaded (tests of the core).
    public let uploader: Uploader?
    /// Coordinates the drive's own reads and writes of content (uploads, document modes).
    public let coordinator: Coordinator
    let logger: Logger
    let daemonUID = geteuid()
    let daemonGID = getegid()
    let mountTime = timespec(tv_sec: time(nil), tv_nsec: 0)
    /// Node ids of the permanent virtual nodes.
    public static let rootID: UInt64 = 1
    static let byAppID: UInt64 = 2
    static let byAppName = ".by-app"
    private let appViews = Mutex<[String: Inode]>([:])
    /// Checks reference files and tokens; nil if the key is missing (every reference is invalid).
    let driveKey: DriveKey?
    /// Grants as "app NUL root NUL item", for the per-app view's check. Lock: leaf.
    let grantSet = Mutex<Set<String>>([])
    /// The adapter's way to drop what the kernel caches (set once the session exists), read
    /// with `kernelInvalidation`. Lock: leaf. Its functions are a struct's fields: a function
    /// type stored directly as a `Mutex`'s value (`Mutex<(@Sendable (UInt64, String) -> Void)?>`)
    /// is kept in its generic form, and every `withLock { $0 }` (an `inout` access) wrote back a
    /// function that wrapped the old one in two reabstraction thunks. After a join of 100,000
    /// items every call ran through hundreds of thousands of thunks (60 % of the daemon's CPU),
    /// and the daemon died. A struct's field keeps its concrete form: nothing is rewritten.
    let invalidation = Mutex<KernelInvalidation?>(nil)
    /// Waits for the RELEASEs the kernel has queued and the daemon has not handled yet (set by
    /// the adapter when it can; FileSystem+Releases). Lock: leaf, never held across the wait.
    let releaseBarrier = Mutex<ReleaseBarrier?>(nil)
    /// How many `noFlush` files hold POSIX locks taken through them (FileSystem+Releases).
    let noFlushLockHolders = Atomic<Int>(0)
    /// The kernel leaves dropping setuid/setgid at writes and truncations to the drive
    /// (FUSE_HANDLE_KILLPRIV_V2, set by the adapter at INIT; FileSystem+Setgid).
    public let dropsSetIDBits = Atomic<Bool>(false)
    /// Closes what removals held, off the request threads (see DeferredFrees).
    package let frees = DeferredFrees()
    /// Folder paths for the notes of removals (see FolderPathCache).
    let folderPaths = FolderPathCache()
    /// The advisory locks processes hold through the mount (see FileSystem+Locks).
    public let locks = LockTable()
    /// Pictures of documents saved in stores (see Thumbnails).
    public let thumbnails: Thumbnailer
    /// Names renamed away a moment ago, for editors' rename-away saves (see FileSystem+Saves).
    let vacated = VacatedNames()
    /// Removals and renames made through the mount that the kernel-cache watch will report
    /// (see OwnEntryChanges).
    let ownChanges = OwnEntryChanges()
    /// Bumped when an item's content moves to another file (an editor's save): references
    /// resolve their targets again.
    let identityChanges = Atomic<UInt64>(0)
    /// What follows each change an operation makes (see ChangeFeed).
    let changes: ChangeFeed

    public convenience init(home: DriveHome, config: DriveConfig, index: ItemIndex, options: FileSystemOptions = .init(),
                            uploader: Uploader? = nil, logger: Logger) {
        self.init(home: home, config: config, index: index, options: options, uploader: uploader, logger: logger, subscribers: [])
    }

    /// `subscribers`: follow every change after the drive's own (see ChangeFeed).
    public init(home: DriveHome, config: DriveConfig, index: ItemIndex, options: FileSystemOptions = .init(),
         uploader: Uploader? = nil, logger: Logger, subscribers: [any ChangeSubscriber]) {
        self.changes = ChangeFeed(adding: subscribers)
        self.uploader = uploader
        self.coordinator = uploader?.coordinator ?? Coordinator()
        self.home = home
        self.options = options
        self.index = index
        self.logger = logger
        // A store added while mounted shows in the mount and starts uploading at the same moment.
        var onReload: (@Sendable (DriveConfig, timespec) -> Void)?
        if let uploader { onReload = { c, m in uploader.apply(c, mtime: m) } }
        self.namespace = Namespace(home: home, config: config, onReload: onReload)
        self.driveKey = try? DriveKey.load(from: home)
        self.thumbnails = Thumbnailer(home: home, logger: logger)
        table.addPermanent(Inode(nodeID: Self.rootID, kind: .root))
        table.addPermanent(Inode(nodeID: Self.byAppID, kind: .byApp))
        loadGrants()
        // What the sync engine changes in the local copies reaches the kernel's cache and the
        // thumbnails (RemoteChanges).
        uploader?.changes.subscribe(self)
    }

    /// Closes every backing descriptor (after unmount).
    public func shutdown() {
        frees.stop()
        table.removeAll()
        index.stop()
    }

    public var liveInodeCount: Int { table.count }
    /// Node descriptors open now (each node the kernel knows holds at most one).
    public var openNodeDescriptors: Int { table.budget.open }

    // MARK: nodes

    @inline(__always)
    func node(_ id: UInt64) throws(Errno) -> Inode {
        guard let n = table.get(id) else { throw .staleNFSFileHandle }
        return n
    }

    /// A node that must be a backing file or folder (the targets of file operations).
    @inline(__always)
    func backing(_ id: UInt64) throws(Errno) -> Inode {
        let n = try node(id)
        guard n.kind == .backing else { throw .permissionDenied }
        return n
    }

    /// A folder in which entries may be created, removed or renamed.
    @inline(__always)
    func writableParent(_ id: UInt64) throws(Errno) -> Inode {
        let n = try node(id)
        guard n.kind == .backing else { throw .permissionDenied }  // the top levels are read-only
        return n
    }

    func appView(_ appID: String) -> Inode {
        appViews.withLock { v in
            if let n = v[appID] { return n }
            let n = Inode(nodeID: table.nextPermanentID() + UInt64(v.count) + 16, kind: .appView, view: .of(app: appID))
            table.addPermanent(n)
            v[appID] = n
            return n
        }
    }

    // MARK: attributes of virtual nodes

    func virtualAttr(_ n: Inode) -> stat {
        var st = stat()
        st.st_ino = __ino_t(0x7fff_ffff_0000_0000 | n.nodeID)
        if n.nodeID == Self.rootID { st.st_ino = 1 }
        st.st_mode = S_IFDIR | 0o555
        // 2 + subfolders, as on a native filesystem (find's leaf optimisation relies on it).
        switch n.kind {
        case .root: st.st_nlink = __nlink_t(3 + namespace.current().topLevelOrder.count)
        case .byApp: st.st_nlink = __nlink_t(2 + namespace.current().config.apps.count)
        case .appView: st.st_nlink = __nlink_t(2 + Namespace.appFolderNames.count)
        case .backing: st.st_nlink = 2
        }
        st.st_uid = daemonUID
        st.st_gid = daemonGID
        st.st_blksize = 4096
        st.st_atim = mountTime
        st.st_mtim = mountTime
        st.st_ctim = mountTime
        return st
    }

    // MARK: lookup / forget / getattr

    public func lookup(parent: UInt64, name: UnsafePointer<CChar>) throws(Errno) -> NodeEntry {
        if name.pointee == 0x2E, let e = try lookupDots(parent: parent, name: name) { return e }  // file handles
        let p = try node(parent)
        if strlen(name) > Names.maxNameBytes { throw .fileNameTooLong }
        switch p.kind {
        case .backing:
            return try lookupBacking(parent: p, name: name)
        case .root:
            let s = String(cString: name)
            if s == Self.byAppName {
                let n = try node(Self.byAppID)
                return NodeEntry(inode: n, attr: virtualAttr(n))
            }
            guard let root = namespace.current().topLevel[s] else { throw .noSuchFileOrDirectory }
            return try lookupTop(root, view: .unified)
        case .byApp:
            let s = String(cString: name)
            guard namespace.current().appFolders[s] != nil else { throw .noSuchFileOrDirectory }
            let n = appView(s)
            return NodeEntry(inode: n, attr: virtualAttr(n))
        case .appView:
            // The view folder's own view: every node below shares its app object.
            guard case .app(let app) = p.view else { throw .noSuchFileOrDirectory }
            let s = String(cString: name)
            guard let root = namespace.current().appFolders[app.id]?[s] else { throw .noSuchFileOrDirectory }
            return try lookupTop(root, view: p.view)
        }
    }

    func lookupTop(_ root: BackingRoot, view: View) throws(Errno) -> NodeEntry {
        let fd = try Sys.openPath(absolute: root.path)
        let st: stat
        do { st = try Sys.stat(fd: fd) } catch { Sys.close(fd); throw error }
        let inode = table.insertOrFind(fd: fd, st: st, root: root, view: view, isTopLevel: true)
        keepInKernel(inode, parent: nil, st)
        return NodeEntry(inode: inode, attr: st)
    }

    /// Looks `name` up in `parent`. A regular file with one link is only stat'ed: its node is
    /// opened on first use (most looked-up files are only stat'ed or listed, and the kernel
    /// forgets them again), which saves an open and a close per file. Folders, symlinks and
    /// files with several links are opened at once, and so is everything when `eager` (a file
    /// about to be opened). `type`: the entry's d_type when a listing gave it.
    func lookupBacking(parent: Inode, name: UnsafePointer<CChar>, eager: Bool = false,
                       type: UInt8 = UInt8(DT_UNKNOWN)) throws(Errno) -> NodeEntry {
        if ReservedNames.isReserved(name) { throw .noSuchFileOrDirectory }
        let pfd = try parent.acquire()
        defer { parent.release() }
        let fd: Int32
        do {
            if !eager, type == UInt8(DT_REG) || type == UInt8(DT_UNKNOWN) {
                let st = try Sys.stat(pfd, name)
                if st.st_mode & S_IFMT == S_IFREG, st.st_nlink == 1 {
                    let inode = table.insertOrFind(fd: -1, st: st, root: parent.root!, view: parent.view,
                                                   isTopLevel: false, lazy: Inode.LazyName(parent: parent, name))
                    keepInKernel(inode, parent: parent, st)
                    return NodeEntry(inode: inode, attr: st)
                }
            }
            fd = try Sys.openPath(pfd, name)
        } catch {
            // In an app's container, a name may be a reference entry (kept under a reserved name).
            if error == .noSuchFileOrDirectory, Self.isContainer(parent.root) {
                return try lookupReference(parent: parent, pfd: pfd, name: name)
            }
            throw error
        }
        let st: stat
        do { st = try Sys.stat(fd: fd) } catch { Sys.close(fd); throw error }
        let inode = table.insertOrFind(fd: fd, st: st, root: parent.root!, view: parent.view, isTopLevel: false)
        keepInKernel(inode, parent: parent, st)
        return NodeEntry(inode: inode, attr: st)
    }

    public func forget(_ id: UInt64, _ n: UInt64) {
        table.forget(id, n)
    }

    /// The kernel's BATCH_FORGET: up to hundreds of forgets under one hold of the table's lock.
    public func forget(_ forgets: some Collection<(UInt64, UInt64)>) {
        table.forget(forgets)
    }

    public func getattr(_ id: UInt64) throws(Errno) -> stat {
        try getattr(node: try node(id))
    }

    func getattr(node n: Inode) throws(Errno) -> stat {
        guard n.kind == .backing else { return virtualAttr(n) }
        if n.reference != nil { return try referenceAttr(n) }
        if let st = n.statUnopened() { return st }
        let nfd = try n.acquire()
        defer { n.release() }
        return try Sys.stat(fd: nfd)
    }

    /// access(2) and chdir on a private mount, where the kernel leaves permission checks to the
    /// drive: the caller is the daemon's own user, so the backing file answers for the daemon's
    /// credentials (its mode, ACLs and read-only mounts). The drive's own levels are read-only.
    public func access(_ id: UInt64, mask: Int32) throws(Errno) {
        let n = try node(id)
        guard n.kind == .backing else {
            if mask & W_OK != 0 { throw .permissionDenied }
            return
        }
        let (nfd, _) = try acquireContent(n)
        defer { n.release() }
        _ = try Sys.check { dd_access_fd(nfd, mask) }
    }

    /// `caller`: who asks (a chmod by someone not in the file's group drops setgid, as natively).
    public func setattr(_ id: UInt64, _ c: AttributeChanges, file: OpenFile?, caller: Caller? = nil) throws(Errno) -> stat {
        try setattr(node: try backing(id), c, file: file, caller: caller)
    }

    func setattr(node n: Inode, _ c: AttributeChanges, file: OpenFile?, caller: Caller?) throws(Errno) -> stat {
        let (nfd, contentRoot) = try acquireContent(n)
        defer { n.release() }
        let fd = file?.fd
        if var mode = c.mode {
            if n.isSymlink { throw .notSupported }
            if mode & S_ISGID != 0, let caller, !caller.keepsPrivilegeBits {
                let group = if let g = c.gid { g } else { try Sys.stat(fd: nfd).st_gid }
                if !PrivilegeBits.chmodKeepsSetgid(caller, fileGroup: group) { mode &= ~S_ISGID }
            }
            if let fd { _ = try Sys.check { fchmod(fd, mode) } } else { _ = try Sys.check { dd_fchmod_path(nfd, mode) } }
        }
        if c.uid != nil || c.gid != nil {
            let uid = c.uid ?? uid_t.max, gid = c.gid ?? gid_t.max
            _ = try Sys.check { fchownat(nfd, "", uid, gid, Sys.AT_EMPTY_PATH | Sys.AT_SYMLINK_NOFOLLOW) }
        }
        if let size = c.size {
            if n.isDirectory { throw .isDirectory }
            // A placeholder (Sync/Placeholder.swift) truncated to nothing is an empty file of the
            // user's; cut to another size it needs its content first, which the FUSE layer
            // fills before it calls this (`placeholderToFill`): one still here is EIO.
            if file == nil, n.fileType == S_IFREG, Placeholder.version(fd: nfd) != nil {
                guard size == 0 else { throw .ioError }
                // Not while it is being downloaded (ahead, or for a reader): the download would
                // write over the user's file. `placeholderToFill` made the request wait for one
                // going on; one that began since fails this truncate (EIO), nothing else.
                let clear = { _ = dd_removexattr_path(nfd, Placeholder.attribute) }
                if let uploader, let root = contentRoot ?? n.root, root.key.hasPrefix("store:"),
                   let path = storePath(fd: nfd, root: root), !path.isEmpty {
                    guard uploader.takePlaceholder(root: root.key, path: path, clear) else { throw .ioError }
                } else {
                    clear()
                }
            } else if file == nil, n.fileType == S_IFREG, let uploader, let root = contentRoot ?? n.root,
                      root.key.hasPrefix("store:"), case .filled = Placeholder.mark(fd: nfd) {
                // Filled in this boot: durable before the user's truncate (Sync/FillCommits.swift).
                let rfd = try Sys.check { dd_reopen(nfd, O_RDONLY | O_CLOEXEC) }
                defer { Sys.close(rfd) }
                guard settleFill(uploader, root: root, fd: rfd) else { throw .ioError }
            }
            defer {
                if let file { file.dirty.store(true, ordering: .relaxed) } else if let root = contentRoot { publish(.truncated(fd: nfd, root: root)) }
            }
            if let fd { _ = try Sys.check { ftruncate(fd, off_t(size)) } } else { _ = try Sys.check { dd_truncate_path(nfd, off_t(size)) } }
            if c.killsSetID { dropPrivilegeBitsForModification(nodeFD: nfd, caller: caller) }
        }
        if c.atime != nil || c.mtime != nil {
            func ts(_ t: AttributeChanges.Time?) -> timespec {
                switch t {
                case .none: return timespec(tv_sec: 0, tv_nsec: dd_UTIME_OMIT)
                case .now: return timespec(tv_sec: 0, tv_nsec: dd_UTIME_NOW)
                case .at(let v): return v
                }
            }
            var times = [ts(c.atime), ts(c.mtime)]
            if let fd {
                _ = try Sys.check { futimens(fd, &times) }
            } else {
                _ = try Sys.check { dd_utimensat_fd(nfd, &times, n.isSymlink ? 1 : 0) }
            }
        }
        return try Sys.stat(fd: nfd)
    }

    public func readlink(_ id: UInt64) throws(Errno) -> [UInt8] {
        let n = try backing(id)
        let nfd = try n.acquire()
        defer { n.release() }
        var buf = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let len = try Sys.check { buf.withUnsafeMutableBufferPointer { readlinkat(nfd, "", $0.baseAddress!, $0.count) } }
        return Array(buf[0..<len])
    }

    // MARK: creating

    /// After creating as the daemon, hands the new item to the caller (only when the daemon is
    /// root and the caller is someone else). A folder with setgid keeps its group for the child.
    /// Returns true when it changed the owner.
    private func giveToCaller(parent: Inode, name: UnsafePointer<CChar>, _ caller: Caller) throws(Errno) -> Bool {
        guard daemonUID == 0, caller.uid != 0 || caller.gid != 0 else { return false }
        let pfd = try parent.acquire()
        defer { parent.release() }
        var gid = caller.gid
        if let pst = try? Sys.stat(fd: pfd), pst.st_mode & S_ISGID != 0 { gid = gid_t.max }
        _ = try Sys.check { fchownat(pfd, name, caller.uid, gid, Sys.AT_SYMLINK_NOFOLLOW) }
        return true
    }

    /// `mode`: the mode the kernel asked for (umask and setgid rules already applied by it).
    /// `reclaiming`: the file renamed away from `name` a moment ago, whose item the new file
    /// continues (an editor's rename-away save).
    private func created(parent: Inode, name: UnsafePointer<CChar>, _ caller: Caller, kind: ItemKind,
                         mode: mode_t = 0, reclaiming: UInt64? = nil) throws(Errno) -> NodeEntry {
        let chowned: Bool
        do {
            chowned = try giveToCaller(parent: parent, name: name, caller)
        } catch {
            if let pfd = try? parent.acquire() {
                _ = unlinkat(pfd, name, kind == .directory ? Sys.AT_REMOVEDIR : 0)
                parent.release()
            }
            throw error
        }
        var e = try lookupBacking(parent: parent, name: name, eager: kind == .file)
        // chown cleared the setuid/setgid bits the caller asked for on its own new file (a
        // native create by the caller keeps them): put them back, on the node, never by name.
        let special = mode & (S_ISUID | S_ISGID)
        if chowned, special != 0, kind != .directory, kind != .symlink, e.attr.st_mode & special != special {
            let efd = try e.inode.acquire()
            defer { e.inode.release() }
            _ = try Sys.check { dd_fchmod_path(efd, (e.attr.st_mode & 0o1777) | special) }
            e.attr = try Sys.stat(fd: efd)
        }
        publish(.created(parent: parent, name: name, ino: UInt64(e.attr.st_ino), kind: kind, reclaiming: reclaiming))
        return e
    }

    /// Runs a creating call under the caller's umask (this thread's own, see dd_thread_umask).
    /// `body` gets the mode to pass: masked here only if the thread's umask cannot be set.
    /// The umask goes back to 0 afterwards: threads this one starts (libfuse's next worker, a
    /// download's, the dispatch pool's) share its umask until they take their own, and the
    /// daemon's other threads make their files with modes that must not be masked.
    private func withCallerUmask<T>(_ caller: Caller, _ mode: mode_t, _ body: (mode_t) throws(Errno) -> T) throws(Errno) -> T {
        let mask = caller.umask ?? 0
        guard dd_thread_umask(mask) >= 0 else { return try body(mode & ~(mask & 0o777)) }
        defer { _ = dd_thread_umask(0) }
        return try body(mode)
    }

    /// A name a request wants to create: too long, or reserved for the drive (references).
    @inline(__always)
    private func checkName(_ name: UnsafePointer<CChar>) throws(Errno) {
        let len = strlen(name)
        if len > Names.maxNameBytes { throw .fileNameTooLong }
        if ReservedNames.isReserved(name, length: len) { throw .invalidArgument }
    }

    public func mknod(parent: UInt64, name: UnsafePointer<CChar>, mode: mode_t, rdev: dev_t, caller: Caller) throws(Errno) -> NodeEntry {
        let p = try writableParent(parent)
        try checkName(name)
        let pfd = try p.acquire()
        defer { p.release() }
        _ = try withCallerUmask(caller, mode) { (m) throws(Errno) in try Sys.check { mknodat(pfd, name, m, rdev) } }
        return try created(parent: p, name: name, caller, kind: (mode & S_IFMT) == S_IFREG ? .file : .other, mode: mode)
    }

    public func mkdir(parent: UInt64, name: UnsafePointer<CChar>, mode: mode_t, caller: Caller) throws(Errno) -> NodeEntry {
        let p = try writableParent(parent)
        try checkName(name)
        let pfd = try p.acquire()
        defer { p.release() }
        _ = try withCallerUmask(caller, mode) { (m) throws(Errno) in try Sys.check { mkdirat(pfd, name, m) } }
        return try created(parent: p, name: name, caller, kind: .directory)
    }

    public func symlink(target: UnsafePointer<CChar>, parent: UInt64, name: UnsafePointer<CChar>, caller: Caller) throws(Errno) -> NodeEntry {
        let p = try writableParent(parent)
        try checkName(name)
        let pfd = try p.acquire()
        defer { p.release() }
        _ = try Sys.check { symlinkat(target, pfd, name) }
        return try created(parent: p, name: name, caller, kind: .symlink)
    }

    public func link(_ id: UInt64, newParent: UInt64, newName: UnsafePointer<CChar>) throws(Errno) -> NodeEntry {
        let n = try backing(id)
        let p = try writableParent(newParent)
        try checkName(newName)
        // Another top-level folder, or the same one seen through another view (.by-app/ID/...):
        // a folder must never get a second parent in the kernel.
        if n.root !== p.root || n.view != p.view { throw .improperLink }
        if n.isDirectory || n.reference != nil { throw .notPermitted }
        let nfd = try n.acquire()
        defer { n.release() }
        let pfd = try p.acquire()
        defer { p.release() }
        _ = try Sys.check { dd_linkat_path(nfd, pfd, newName) }
        publish(.linked(parent: p, name: newName))
        return try lookupBacking(parent: p, name: newName)
    }

    /// Creates and opens a file. `noFlush`: the kernel will send no FLUSH for this open (the
    /// adapter asks for it when it can wait for queued releases, `setReleaseBarrier`); taken
    /// only for a file this call made, not for an existing one or a save through a reference.
    public func create(parent: UInt64, name: UnsafePointer<CChar>, mode: mode_t, flags: Int32, caller: Caller,
                       noFlush: Bool = false) throws(Errno) -> (NodeEntry, OpenFile) {
        let p = try writableParent(parent)
        try checkName(name)
        let (f, direct) = backingOpenFlags(flags)
        let pfd = try p.acquire()
        defer { p.release() }
        // An editor's rename-away save (`name` -> `name~`, then `name` again): the same document.
        let former = vacatedFor(create: p, name: name)
        if case .reference(let token) = former,
           let saved = createThroughReference(parent: p, pfd: pfd, name: name, token: token, flags: flags, caller: caller) {
            return saved
        }
        // Always exclusive: only a file this call made is handed to the caller (chown). If one
        // appeared since the kernel's lookup (made behind the mount's back) and the caller did
        // not ask for O_EXCL, open it as it is, like a native open(O_CREAT) would.
        let fd: Int32
        do throws(Errno) {
            fd = try withCallerUmask(caller, mode) { (m) throws(Errno) in
                try Sys.check { openat(pfd, name, f | O_CREAT | O_EXCL | Sys.O_NOFOLLOW | Sys.O_CLOEXEC, m) }
            }
        } catch {
            guard error == .fileExists, flags & O_EXCL == 0 else { throw error }
            let existing = try Sys.check { openat(pfd, name, f | Sys.O_NOFOLLOW | Sys.O_CLOEXEC) }
            do throws(Errno) {
                let e = try lookupBacking(parent: p, name: name, eager: true)
                let version = (try? Sys.stat(fd: existing)).map(FileVersion.init)
                return (e, OpenFile(fd: existing, inode: e.inode, flags: flags, version: version, directIO: direct, keepCache: false))
            } catch {
                Sys.close(existing)
                throw error
            }
        }
        do {
            var reclaiming: UInt64?
            if case .file(let ino) = former { reclaiming = ino }
            let e = try created(parent: p, name: name, caller, kind: .file, mode: mode, reclaiming: reclaiming)
            e.inode.cachedVersion.withLock { $0 = FileVersion(e.attr) }
            // A file made just now has no file capability (none is inherited): the kernel's look
            // for one before the first write is answered without a getxattr of the backing file.
            e.inode.hasNoCapability.store(true, ordering: .relaxed)
            let f = OpenFile(fd: fd, inode: e.inode, flags: flags, version: FileVersion(e.attr), directIO: direct, keepCache: false,
                             noFlush: noFlush)
            f.dirty.store(true, ordering: .relaxed)  // a new file, even empty, is a save
            return (e, f)
        } catch {
            Sys.close(fd)
            throw error
        }
    }

    // MARK: removing and renaming

    public func unlink(parent: UInt64, name: UnsafePointer<CChar>) throws(Errno) {
        let p = try writableParent(parent)
        let pfd = try p.acquire()
        defer { p.release() }
        if ReservedNames.isReserved(name) { throw .noSuchFileOrDirectory }
        vacated.forget(folder: p, name: name)
        let st: stat
        do {
            st = try Sys.stat(pfd, name)
        } catch {
            // rm of a reference entry removes the reference only, never its target.
            guard error == .noSuchFileOrDirectory, Self.isContainer(p.root) else { throw error }
            let ref = String(cString: name) + ReservedNames.referenceSuffix
            _ = try Sys.check { unlinkat(pfd, ref, 0) }
            return
        }
        let own = expectOwnChange(p, name)
        let held = holdForFreeing(pfd, name, st)
        do {
            _ = try Sys.check { unlinkat(pfd, name, 0) }
        } catch {
            withdrawOwnChange(own, p, pfd, name)
            if held >= 0 { Sys.close(held) }
            throw error
        }
        publish(.removed(parent: p, name: name, st: st))
        freeLater(held)
    }

    public func rmdir(parent: UInt64, name: UnsafePointer<CChar>) throws(Errno) {
        let p = try writableParent(parent)
        let pfd = try p.acquire()
        defer { p.release() }
        let st = try Sys.stat(pfd, name)
        let own = expectOwnChange(p, name)
        let held = holdForFreeing(pfd, name, st)
        do {
            _ = try Sys.check { unlinkat(pfd, name, Sys.AT_REMOVEDIR) }
        } catch {
            withdrawOwnChange(own, p, pfd, name)
            if held >= 0 { Sys.close(held) }
            throw error
        }
        publish(.removed(parent: p, name: name, st: st))
        freeLater(held)
    }

    /// Before `name` (`st`) is removed or replaced: an O_PATH descriptor of it when removing its
    /// last name frees blocks, so that they are freed off this thread (see DeferredFrees); -1
    /// if not. A name replaced behind the mount's back in between costs nothing: the
    /// descriptor then holds the other file a moment longer.
    ///
    /// Only while the backing file system has room to spare (`DeferredFrees.spareRoom`, and
    /// twice what the file holds): whoever removes a file to make room on a full disk writes
    /// again at once, and must find the room there.
    private func holdForFreeing(_ pfd: Int32, _ name: UnsafePointer<CChar>, _ st: stat) -> Int32 {
        let type = st.st_mode & S_IFMT
        guard st.st_blocks > 0, type == S_IFDIR || (type == S_IFREG && st.st_nlink <= 1) else { return -1 }
        var sv = statvfs()
        guard fstatvfs(pfd, &sv) == 0 else { return -1 }
        let room = UInt64(sv.f_bavail) * UInt64(sv.f_frsize)
        guard room >= max(DeferredFrees.spareRoom, 2 * UInt64(st.st_blocks) * 512) else { return -1 }
        return openat(pfd, name, Sys.O_PATH | Sys.O_NOFOLLOW | Sys.O_CLOEXEC)
    }

    private func freeLater(_ held: Int32) {
        if held >= 0, !frees.hand(held) { Sys.close(held) }
    }

    public func rename(parent: UInt64, name: UnsafePointer<CChar>, newParent: UInt64, newName: UnsafePointer<CChar>, flags: UInt32) throws(Errno) {
        let p = try writableParent(parent)
        let np = try writableParent(newParent)
        try checkName(newName)
        // Two top-level folders are two stores or containers: `mv` copies when told EXDEV. So are
        // two views of one folder (Notes/ and .by-app/ID/Documents/): each view has its own nodes.
        if p.root !== np.root || p.view != np.view { throw .improperLink }
        let pfd = try p.acquire()
        defer { p.release() }
        let npfd = try np.acquire()
        defer { np.release() }
        if ReservedNames.isReserved(name) { throw .noSuchFileOrDirectory }
        let src: stat
        do {
            src = try Sys.stat(pfd, name)
        } catch {
            guard error == .noSuchFileOrDirectory, Self.isContainer(p.root) else { throw error }
            try renameReference(pfd, name, npfd, newName, flags: flags)
            vacated.forget(folder: np, name: newName)
            noteVacatedReference(parent: p, name: name, to: np, npfd: npfd, newName)
            return
        }
        let exchange = flags & UInt32(dd_RENAME_EXCHANGE) != 0
        let dst = try? Sys.stat(npfd, newName)
        // A reference entry shown under the new name is replaced, as a file there would be.
        let shadowed = dst == nil && Self.isContainer(np.root) && !exchange
            ? String(cString: newName) + ReservedNames.referenceSuffix : nil
        if let shadowed, (try? Sys.stat(npfd, shadowed)) != nil {
            if flags & UInt32(dd_RENAME_NOREPLACE) != 0 { throw .fileExists }
            // An editor's save onto the document's name: the document is saved, the reference stays.
            if try saveThroughReference(parent: p, pfd: pfd, name: name, src: src, refParent: np, npfd: npfd, newName: newName) {
                vacated.forget(folder: np, name: newName)
                return
            }
        }
        // An exchange is reported as two moves each way: it is told to the kernel as before. A
        // rename onto another link of the same file does nothing and reports nothing.
        let sameFile = dst.map { $0.st_dev == src.st_dev && $0.st_ino == src.st_ino } ?? false
        let ownFrom = exchange || sameFile ? nil : expectOwnChange(p, name)
        let ownTo = exchange || sameFile ? nil : expectOwnChange(np, newName)
        let held = exchange || sameFile ? -1 : dst.map { holdForFreeing(npfd, newName, $0) } ?? -1
        do {
            if flags == 0 {
                _ = try Sys.check { renameat(pfd, name, npfd, newName) }
            } else {
                _ = try Sys.check { dd_renameat2(pfd, name, npfd, newName, flags) }
            }
        } catch {
            withdrawOwnChange(ownFrom, p, pfd, name)
            withdrawOwnChange(ownTo, np, npfd, newName)
            if held >= 0 { Sys.close(held) }
            throw error
        }
        if let shadowed { _ = unlinkat(npfd, shadowed, 0) }
        vacated.forget(folder: np, name: newName)
        if !exchange { noteVacated(parent: p, name: name, src: src, to: np, newName) }
        publish(.renamed(from: p, name: name, to: np, newName: newName, src: src, dst: dst, exchange: exchange))
        freeLater(held)
    }

    // MARK: open files

    /// Flags for the backing open: the kernel's writeback cache may read a write-only file and
    /// appends itself; O_DIRECT is not passed on (FUSE's buffers are not aligned for it).
    private func backingOpenFlags(_ flags: Int32) -> (Int32, Bool) {
        var f = flags & ~(O_CREAT | O_EXCL | O_NOCTTY | Sys.O_NOFOLLOW)
        let direct = f & Sys.O_DIRECT != 0
        f &= ~Sys.O_DIRECT
        if options.writebackCache {
            if f & O_ACCMODE == O_WRONLY { f = (f & ~O_ACCMODE) | O_RDWR }
            f &= ~O_APPEND
        }
        return (f, direct)
    }

    /// `caller`: who opens (a truncating open by anyone but root drops setuid/setgid, as the
    /// kernel does for a native open(O_TRUNC); with atomic O_TRUNC it leaves that to us).
    public func open(_ id: UInt64, flags: Int32, caller: Caller? = nil) throws(Errno) -> OpenFile {
        switch try openOrFill(id, flags: flags, caller: caller) {
        case .opened(let f): return f
        case .placeholder: throw .ioError
        }
    }

    /// What an open found: the open file, or a placeholder whose content must come first
    /// (`fill`, then open again).
    public enum OpenOutcome {
        case opened(OpenFile)
        case placeholder(root: String, path: StorePath)
    }

    /// Opens the file, unless it is a placeholder (Sync/Placeholder.swift) that the open needs
    /// the content of: an open with O_TRUNC for writing makes it an empty file of the user's.
    public func openOrFill(_ id: UInt64, flags: Int32, caller: Caller? = nil) throws(Errno) -> OpenOutcome {
        let n = try backing(id)
        if n.isDirectory { throw .isDirectory }
        let (f, direct) = backingOpenFlags(flags)
        let (nfd, contentRoot) = try acquireContent(n)
        defer { n.release() }
        // noatime: a read moves no access time (Sys.reopenQuietly).
        let fd = try Sys.check { options.accessTimes.filesKept ? Sys.reopenQuietly(nfd, f) : dd_reopen(nfd, f) }
        // Only a store's file can be a placeholder: an app's files cost no extra system call.
        let mark = n.fileType == S_IFREG && (contentRoot ?? n.root)?.key.hasPrefix("store:") == true ? Placeholder.mark(openFD: fd) : nil
        // Filled in this boot, its content not known to be on the disk yet: made durable before
        // it can become the user's file (Sync/FillCommits.swift).
        if case .filled = mark, flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0 {
            guard let uploader, let root = contentRoot ?? n.root, settleFill(uploader, root: root, fd: fd) else {
                Sys.close(fd)
                throw .ioError
            }
        }
        if case .placeholder = mark {
            if flags & O_TRUNC != 0, flags & O_ACCMODE != O_RDONLY {
                // The user's empty file now, unless it is being downloaded (ahead, or for a
                // reader): then the open waits for that download, and truncates after it.
                let clear = { _ = Placeholder.clear(fd: fd) }
                if let uploader, let root = contentRoot ?? n.root, let path = storePath(fd: nfd, root: root), !path.isEmpty {
                    if !uploader.takePlaceholder(root: root.key, path: path, clear) {
                        Sys.close(fd)
                        return .placeholder(root: root.key, path: path)
                    }
                } else {
                    clear()
                }
            } else {
                Sys.close(fd)
                guard let uploader, let root = contentRoot ?? n.root, let path = storePath(fd: nfd, root: root), !path.isEmpty,
                      uploader.uploads(root.key) else { throw .ioError }
                if let pid = caller?.pid, let program = uploader.refusedIndexer(root.key, pid: pid) {
                    logger.debug("\(program) (pid \(pid)) is refused the content of placeholder \(path) (the store's indexers: skip)")
                    throw .permissionDenied
                }
                return .placeholder(root: root.key, path: path)
            }
        }
        var keep = false
        var version: FileVersion?
        if let st = try? Sys.stat(fd: fd) {
            let v = FileVersion(st)
            version = v
            if n.fileType == S_IFREG, let uploader, let root = contentRoot ?? n.root, root.key.hasPrefix("store:") {
                uploader.openedStoreFile(root: root.key, ino: UInt64(st.st_ino))
            }
            keep = n.cachedVersion.withLock { old in
                defer { old = v }
                return old == v
            }
        }
        if flags & O_TRUNC != 0 {
            keep = false
            if let caller, caller.uid != 0, let st = try? Sys.stat(fd: fd), st.st_mode & S_IFMT == S_IFREG {
                let mode = st.st_mode & 0o7777
                let kill = (mode & S_ISUID) | (mode & (S_ISGID | S_IXGRP) == (S_ISGID | S_IXGRP) ? S_ISGID : 0)
                if kill != 0 { _ = fchmod(fd, mode & ~kill) }
            }
        }
        let file = OpenFile(fd: fd, inode: n, flags: flags, version: version, directIO: direct, keepCache: keep,
                            contentRoot: contentRoot)
        // A store's file that a download replaced since the kernel looked its name up: the
        // kernel's node is the old file, which no name holds now, and what is written to it
        // would be lost. ESTALE makes the kernel look the name up again (open(2) retries once,
        // revalidating) and open the new file. Checked once the file counts as open for
        // writing, which a download checks before it replaces a file.
        if file.writable, (contentRoot ?? n.root)?.key.hasPrefix("store:") == true,
           let now = try? Sys.stat(fd: fd), now.st_nlink == 0 {
            Sys.close(fd)
            throw .staleNFSFileHandle
        }
        if flags & O_TRUNC != 0 { file.dirty.store(true, ordering: .relaxed) }
        return .opened(file)
    }

    /// Downloads the content of the placeholder `path` of store `root` on another thread and
    /// calls `done` there: nil when it is here (open it again), else the errno for the open
    /// (ENOENT: deleted on the remote meanwhile; EIO: offline or failed, said in the log and
    /// in `docdrive status`).
    /// The placeholder a truncate by path (no open file) of node `id` to `size` needs filled
    /// first: cut to any size but 0, it keeps its first bytes, which must be here. Nil when it
    /// needs nothing (then `kernelSetattr` does it all).
    /// Cut to 0 it needs nothing, unless it is being downloaded: then the truncate waits for that.
    public func placeholderToFill(_ id: UInt64, size: Int64?, file: OpenFile?) -> (root: String, path: StorePath)? {
        guard let size, file == nil, let uploader, let n = try? backing(id), n.fileType == S_IFREG,
              let content = try? acquireContent(n) else { return nil }
        defer { n.release() }
        guard let root = content.root ?? n.root, root.key.hasPrefix("store:"), Placeholder.version(fd: content.fd) != nil,
              uploader.uploads(root.key), let path = storePath(fd: content.fd, root: root), !path.isEmpty else { return nil }
        if size == 0, !uploader.isDownloading(root: root.key, path: path) { return nil }
        return (root.key, path)
    }

    public func fill(root: String, path: StorePath, done: @escaping @Sendable (Errno?) -> Void) {
        guard let uploader else { return done(.ioError) }
        uploader.fill(root: root, path: path, opened: true) { e in
            guard let e else { return done(nil) }
            // Gone from the remote: ENOENT; no room for it here: ENOSPC (or EDQUOT); else EIO.
            done(e.code == .notFound ? .noSuchFileOrDirectory : e.noRoomErrno ?? .ioError)
        }
    }

    public func write(_ file: OpenFile, _ buf: UnsafeRawPointer, count: Int, offset: Int64) throws(Errno) -> Int {
        file.dirty.store(true, ordering: .relaxed)
        return try Sys.check { pwrite(file.fd, buf, count, off_t(offset)) }
    }

    public func read(_ file: OpenFile, into buf: UnsafeMutableRawPointer, count: Int, offset: Int64) throws(Errno) -> Int {
        try Sys.check { pread(file.fd, buf, count, off_t(offset)) }
    }

    /// A close of one descriptor: `lockOwner` (the closing process, sent by the kernel) loses
    /// its POSIX locks on the file, as on a native close.
    /// A close(2) of a descriptor of the file (release, the last close, comes later and
    /// asynchronously): a written file is a save as soon as close returns, so `status` and
    /// `user.docdrive.status` say "pending" right after it.
    public func flush(_ file: OpenFile, lockOwner: UInt64? = nil) throws(Errno) {
        if let lockOwner { dropLocks(file, owner: lockOwner) }
        if (file.writable && file.writesBypass.load(ordering: .relaxed)) || file.dirty.load(ordering: .relaxed) {
            let st = try? Sys.stat(fd: file.fd)
            noticeBypassedWrites(file, st)
            saved(file, st)
        }
    }

    public func release(_ file: OpenFile) {
        releaseLocks(file)
        if file.noFlush { releasedWithoutFlush(file) }
        if file.writesBypass.load(ordering: .relaxed), file.mappableShared { file.inode.mappableOpens.subtract(1, ordering: .relaxed) }
        // A passthrough file left nothing to note when it was only read, or only written (the
        // last close's flush looked at its version, and without read access it cannot be
        // mapped, so nothing can have written it since); the FUSE page cache was never used.
        // A file without flushes has had no such look: its release is its close.
        if file.writesBypass.load(ordering: .relaxed), !file.writable || !file.readable,
           !file.dirty.load(ordering: .relaxed), !file.noFlush {
            Sys.close(file.fd)
            return
        }
        // Remember the version the page cache now holds, so the next open can keep it.
        let st = try? Sys.stat(fd: file.fd)
        if let st { file.inode.cachedVersion.withLock { $0 = FileVersion(st) } }
        noticeBypassedWrites(file, st)
        saved(file, st)
        Sys.close(file.fd)
    }

    public func fsync(_ file: OpenFile, dataOnly: Bool) throws(Errno) {
        _ = try Sys.check { dataOnly ? fdatasync(file.fd) : Glibc.fsync(file.fd) }
        let st = try? Sys.stat(fd: file.fd)
        if let st { file.inode.fsyncedVersion.withLock { $0 = FileVersion(st) } }
        noticeBypassedWrites(file, st)
        saved(file, st)
    }

    /// A written file's content is saved (close, flush, fsync): published once per change.
    private func saved(_ file: OpenFile, _ st: stat?) {
        guard file.dirty.exchange(false, ordering: .relaxed) else { return }
        publish(.saved(file, links: st.map { UInt64($0.st_nlink) }))
    }

    /// Runs `body` with an O_PATH descriptor of the file `file` reads and writes, one that is
    /// not `file`'s own open file description (the kernel may keep it after `file` is closed):
    /// the node's own path descriptor, or a new one for a reference's target. Nil if there is none.
    public func withContentPath<T>(_ file: OpenFile, _ body: (Int32) -> T) -> T? {
        if file.inode.reference == nil, let fd = try? file.inode.acquire() {
            defer { file.inode.release() }
            return body(fd)
        }
        let fd = dd_reopen(file.fd, Sys.O_PATH | Sys.O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Sys.close(fd) }
        return body(fd)
    }

    /// The kernel will write `file`'s backing file without calling `write` (FUSE passthrough).
    public func writesBypass(_ file: OpenFile) {
        file.writesBypass.store(true, ordering: .relaxed)
        if file.mappableShared { file.inode.mappableOpens.add(1, ordering: .relaxed) }
    }

    /// For a file whose writes bypass the drive: a changed version (size, mtime or ctime, which
    /// every write moves) since the last look means it was written, so its close is a save.
    /// Filesystems with fine-grained change times (ext4, xfs, btrfs, tmpfs on Linux 6.13+)
    /// give a write right after the open a new ctime, because the open looked at it.
    private func noticeBypassedWrites(_ file: OpenFile, _ st: stat?) {
        guard file.writable, file.writesBypass.load(ordering: .relaxed), let st else { return }
        let now = FileVersion(st)
        let changed = file.seenVersion.withLock { seen in
            defer { seen = now }
            return seen != now
        }
        if changed { file.dirty.store(true, ordering: .relaxed) }
    }

    /// `caller`: who asks (allocating, punching or zeroing drops setuid/setgid as a write does).
    public func fallocate(_ file: OpenFile, mode: Int32, offset: Int64, length: Int64, caller: Caller? = nil) throws(Errno) {
        file.dirty.store(true, ordering: .relaxed)
        dropPrivilegeBitsForModification(fd: file.fd, caller: caller)
        _ = try Sys.check { dd_fallocate(file.fd, mode, off_t(offset), off_t(length)) }
    }

    public func lseek(_ file: OpenFile, offset: Int64, whence: Int32) throws(Errno) -> Int64 {
        Int64(try Sys.check { Glibc.lseek(file.fd, off_t(offset), whence) })
    }

    public func copyFileRange(from: OpenFile, offsetIn: Int64, to: OpenFile, offsetOut: Int64, length: Int, flags: UInt32) throws(Errno) -> Int {
        var oi = off_t(offsetIn), oo = off_t(offsetOut)
        to.dirty.store(true, ordering: .relaxed)
        return try Sys.check { dd_copy_file_range(from.fd, &oi, to.fd, &oo, length, flags) }
    }

    // MARK: file system

    public func statfs(_ id: UInt64) throws(Errno) -> statvfs {
        let n = try node(id)
        frees.settle()  // space just freed by a removal counts as free
        var sv = statvfs()
        if n.kind == .backing {
            let nfd = try n.acquire()
            defer { n.release() }
            _ = try Sys.check { fstatvfs(nfd, &sv) }
        } else {
            _ = try Sys.check { dd_statvfs(home.path, &sv) }
        }
        sv.f_namemax = UInt(Names.maxNameBytes)
        return sv
    }
}
