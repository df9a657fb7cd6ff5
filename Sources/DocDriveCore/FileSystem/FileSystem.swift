// FileSystem: the drive's POSIX operations over backing folders, by descriptor; no FUSE in here.
// This file: the façade (its parts, the lock order, nodes by id); the operations are in
// FileSystem+*.swift, one file per group (lookup, attributes, create, remove and rename, open).
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
/// Its locks, with every other lock of the drive, are in one order: Coordination/LockOrder.md.
public final class DriveFileSystem: Sendable {
    public let home: DriveHome
    public let options: FileSystemOptions
    let namespace: Namespace
    let table = InodeTable()
    public let index: ItemIndex
    /// Uploads what is saved in stores; nil when nothing is uploaded (tests of the core).
    public let sync: SyncService
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
    /// The drive's stream, where each change an operation makes is published (DriveChanges).
    let changes: DriveChanges
    /// The files open through the mount (the sync engine asks the same).
    let openFiles: OpenFiles
    /// Where entry invalidations wait for their folders' locks, in the order they were asked
    /// (`invalidateLater`).
    let kernelNotices = DispatchQueue(label: "docdrive-kernel-notices")

    /// Made by `Drive`, which owns the parts given here.
    init(home: DriveHome, config: DriveConfig, index: ItemIndex, options: FileSystemOptions, sync: SyncService,
         openFiles: OpenFiles, changes: DriveChanges, logger: Logger) {
        self.changes = changes
        self.openFiles = openFiles
        self.sync = sync
        self.coordinator = sync.coordinator
        self.home = home
        self.options = options
        self.index = index
        self.logger = logger
        // A store added while mounted shows in the mount and starts uploading at the same moment.
        self.namespace = Namespace(home: home, config: config, configWatch: sync.configWatch)
        self.driveKey = try? DriveKey.load(from: home)
        self.thumbnails = Thumbnailer(home: home, logger: logger)
        table.addPermanent(Inode(nodeID: Self.rootID, kind: .root))
        table.addPermanent(Inode(nodeID: Self.byAppID, kind: .byApp))
        loadGrants()
        // What the sync engine and the document modes change in the backing folders reaches the
        // kernel's cache, and a document that arrived gets its picture (DriveChanges).
        changes.subscribeWeakly(self)
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
