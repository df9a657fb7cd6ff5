// Inode: the nodes the kernel knows (virtual folders and backing files) and the table that owns them.
import CDocDriveSys
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// One top-level tree of the drive: an app's Documents/Data/Inbox folder or a store's cache.
public final class BackingRoot: Sendable {
    /// Identity used by the index: "store:NAME" or "app:ID:Documents".
    public let key: String
    /// Absolute path of the backing folder.
    public let path: String

    init(key: String, path: String) {
        self.key = key
        self.path = path
    }
}

/// Which view a node belongs to: the unified tree, or one app's confined `.by-app/ID` tree.
/// Separate views get separate inodes, so that no folder has two parents in the kernel.
/// An app's view carries its id in a shared object: 8 bytes in every node, not a string's 16.
public enum View: Hashable, Sendable {
    case unified
    case app(ViewApp)

    /// The view of the app `id`.
    static func of(app id: String) -> View { .app(ViewApp(id)) }
}

/// The app of a view (`.by-app/ID`), equal by its id.
public final class ViewApp: Hashable, Sendable {
    public let id: String

    init(_ id: String) { self.id = id }

    public static func == (a: ViewApp, b: ViewApp) -> Bool { a === b || a.id == b.id }
    public func hash(into h: inout Hasher) { h.combine(id) }
}

/// A name a node keeps (where it was looked up, to open it on first use): its bytes and a NUL
/// in one allocation 16 bytes longer than them, where an array's header alone is 32 (a
/// 32-byte block for a name of up to 15 bytes, against 48 for an array of up to 8).
/// Never changed once made, so it may cross threads (ManagedBuffer itself is not Sendable).
final class KeptName: ManagedBuffer<Void, CChar> {
    static func make(_ name: UnsafePointer<CChar>) -> KeptName {
        let n = strlen(name) + 1
        let b = unsafeDowncast(KeptName.create(minimumCapacity: n) { _ in () }, to: KeptName.self)
        b.withUnsafeMutablePointerToElements { $0.update(from: name, count: n) }
        return b
    }

    /// The name, NUL-terminated.
    func withName<R>(_ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
        try withUnsafeMutablePointerToElements { try body(UnsafePointer($0)) }
    }
}

/// A node the kernel holds a reference to.
public final class Inode: Sendable {
    /// One byte: an app's view folder (`.by-app/ID`) has its app in `view`.
    public enum Kind: UInt8, Sendable, Equatable {
        case root
        case byApp
        case appView
        case backing
    }

    /// The node's O_PATH descriptor and who is using it. An idle node's descriptor may be closed
    /// to stay within the open-file limit (the kernel can hold far more nodes than a process may
    /// have descriptors); it is reopened from its file handle on next use.
    ///
    /// Its fields are ordered by size (a struct is laid out in the order written): the
    /// references first, the 4-byte ones, then the flags, so that no padding lies between them.
    struct Slot {
        /// How to open the node when it has no descriptor: a node is either never opened (a
        /// name) or has been opened (a handle, once evicted), so one field holds either, in
        /// 16 bytes where a field for each and the anchor took 28.
        enum Way {
            case none
            /// Not opened yet: where the node was last seen, to open it on first use.
            case lazy(LazyName)
            /// File handle and an open folder on the same filesystem (`anchor`), set at eviction
            /// (and kept once reopened).
            case handle([UInt8], anchor: Int32)
        }
        var way = Way.none
        /// The versions a file keeps once it is opened or created through the mount, or a
        /// folder once it is listed (nil until then: most nodes are only looked up, and two
        /// versions inline were a third of a node). Under this lock rather than one of their
        /// own (8 bytes of every node): what reads or sets them does nothing else meanwhile.
        var versions: OpenedVersions? = nil
        /// O_PATH descriptor of the backing file, or -1 while evicted (or for virtual nodes).
        var fd: Int32
        /// Operations currently using `fd` (between `acquire()` and `release()`).
        var users: Int32 = 0
        /// Open files made from this node (they hold their own descriptors).
        var opens: Int32 = 0
        /// Used since the last eviction sweep (a clock bit).
        var referenced = true
        /// Forgotten by the kernel: the descriptor closes when the last user lets go.
        var dead = false
        /// Cannot be reopened (no file handle on this filesystem, or deleted): never evicted.
        var pinned = false
        /// Removed through the mount and its descriptor closed at once (see `closeRemoved`).
        var removed = false
        /// Its file became another item's content, or was replaced, behind the kernel's back
        /// (an editor's save through a reference): it answers ESTALE, so that the kernel looks
        /// its path up again and finds what is there now (see `closeReplaced`).
        var replaced = false

        init(fd: Int32) { self.fd = fd }

        var lazy: LazyName? {
            if case .lazy(let l) = way { l } else { nil }
        }
        var handle: [UInt8]? {
            if case .handle(let h, _) = way { h } else { nil }
        }
        /// Opened at last: the name is no longer needed (a handle is kept).
        mutating func dropLazy() {
            if case .lazy = way { way = .none }
        }
    }

    /// A regular file looked up but not opened (most looked-up files are only stat'ed): its
    /// folder's node and its name there. The first use opens it and checks that the name
    /// still leads to the same file; if not, it answers ESTALE, which makes the kernel look
    /// the path up again (LOOKUP_REVAL) and find whatever is there now.
    struct LazyName: @unchecked Sendable {  // see KeptName
        let parent: Inode
        let name: KeptName

        init(parent: Inode, _ name: UnsafePointer<CChar>) {
            self.parent = parent
            self.name = KeptName.make(name)
        }
    }

    // The stored fields are ordered by size (a class is laid out in the order written), so
    // that no padding lies between them: 135 bytes, a 144-byte allocation (256 when they were
    // in the order of their meaning; 208 while the kind and the view carried an app id's
    // string, the versions had a lock of their own and each node referred to the descriptor
    // budget; 160 while the slot had a field for the name and one for the handle, and the file
    // type took 4 bytes); every node the kernel holds has one.
    public let nodeID: UInt64
    let dev: UInt64
    let ino: UInt64
    /// A digest of the attributes the kernel was last told (FileSystem+KernelCache).
    let told = Atomic<UInt64>(0)
    let root: BackingRoot?
    /// Set for a reference entry: the node's own descriptor is the reference file; its
    /// content and attributes are the target's.
    public let reference: ReferenceLink?
    let view: View
    /// Follows renames; never resolves symlinks, so no request can walk out of its backing folder.
    private let slot: Mutex<Slot>
    public let kind: Kind
    /// The S_IFMT bits of the backing file, shifted into one byte (see `fileType`).
    private let typeBits: UInt8
    /// The kernel's cache of this node (FileSystem+KernelCache): the inotify watch of this
    /// folder (-1: none).
    let watch = Atomic<Int32>(-1)
    /// Open files of this node whose I/O the kernel passes through and that a shared writable
    /// mapping could change (opened for reading and writing): see FileSystem+MappedTimes.
    let mappableOpens = Atomic<Int32>(0)
    /// True for the backing folder shown at the top of a view (it cannot be renamed or removed).
    let isTopLevel: Bool
    /// The backing file was found to have no `security.capability`: the kernel asks for it
    /// before every write (to drop it), and the answer is kept until one is set through the mount.
    let hasNoCapability = Atomic<Bool>(false)
    /// Whether the kernel may keep the node's entry and attributes long (FileSystem+KernelCache).
    let keptLong = Atomic<Bool>(false)

    /// Content version (mtime, ctime, size) the kernel's page cache holds, to decide keep_cache.
    var cachedVersion: VersionField { VersionField(node: self, which: .cached) }
    /// The content version of the last fsync through the mount (see `hasUnsyncedWrites`).
    var fsyncedVersion: VersionField { VersionField(node: self, which: .fsynced) }
    /// For a folder: the backing folder's version when the listing that the kernel may hold in
    /// its cache was read, nil if none may be trusted (see FileSystem+Directories).
    var listedVersion: VersionField { VersionField(node: self, which: .listed) }

    /// What the slot's `versions` holds, only under its lock.
    final class OpenedVersions {
        var cached: FileVersion?
        var fsynced: FileVersion?
        var listed: FileVersion?
    }

    /// One of a node's versions, read and changed under the node's slot lock (a leaf); the
    /// box is made at the first change.
    struct VersionField {
        enum Which { case cached, fsynced, listed }
        let node: Inode
        let which: Which

        func withLock<R>(_ body: (inout FileVersion?) -> R) -> R {
            node.slot.withLock { s in
                var value: FileVersion?
                if let box = s.versions {
                    switch which {
                    case .cached: value = box.cached
                    case .fsynced: value = box.fsynced
                    case .listed: value = box.listed
                    }
                }
                let result = body(&value)
                if s.versions == nil, value == nil { return result }
                let b = s.versions ?? OpenedVersions()
                switch which {
                case .cached: b.cached = value
                case .fsynced: b.fsynced = value
                case .listed: b.listed = value
                }
                s.versions = b
                return result
            }
        }
    }

    init(nodeID: UInt64, kind: Kind, fd: Int32 = -1, dev: UInt64 = 0, ino: UInt64 = 0,
         fileType: mode_t = S_IFDIR, root: BackingRoot? = nil, view: View = .unified, isTopLevel: Bool = false,
         reference: ReferenceLink? = nil, lazy: LazyName? = nil) {
        self.reference = reference
        self.nodeID = nodeID
        self.kind = kind
        var slot = Slot(fd: fd)
        if let lazy { slot.way = .lazy(lazy) }
        self.slot = Mutex(slot)
        self.dev = dev
        self.ino = ino
        typeBits = UInt8(truncatingIfNeeded: (fileType & S_IFMT) >> 12)
        self.root = root
        self.view = view
        self.isTopLevel = isTopLevel
    }

    /// S_IFMT bits of the backing file.
    var fileType: mode_t { mode_t(typeBits) << 12 }
    var isDirectory: Bool { fileType == S_IFDIR }
    var isSymlink: Bool { fileType == S_IFLNK }

    /// The node's descriptor, held open until the matching `release()` (use `defer`).
    /// Virtual nodes answer -1 and need no release (it is a no-op for them).
    func acquire() throws(Errno) -> Int32 {
        guard kind == .backing else { return -1 }
        enum Next { case ready(Int32), reopen([UInt8], Int32), open(LazyName), gone, removed }
        let next: Next = slot.withLock { s in
            if s.fd >= 0 {
                s.users += 1
                s.referenced = true
                return .ready(s.fd)
            }
            guard !s.dead, !s.replaced else { return .gone }
            if s.removed { return .removed }
            if let l = s.lazy { return .open(l) }
            guard case .handle(let h, let anchor) = s.way else { return .gone }
            return .reopen(h, anchor)
        }
        let fresh: Int32
        switch next {
        case .ready(let fd):
            return fd
        case .gone:
            throw .staleNFSFileHandle
        case .removed:
            throw .noSuchFileOrDirectory
        case .reopen(let handle, let anchor):
            fresh = try Sys.check {
                handle.withUnsafeBufferPointer { dd_open_by_handle(anchor, $0.baseAddress, Int32($0.count), Sys.O_PATH | Sys.O_NOFOLLOW) }
            }
        case .open(let l):
            fresh = try openLazily(l)
        }
        let (fd, spare): (Int32, Int32) = slot.withLock { s in
            s.users += 1
            s.referenced = true
            s.dropLazy()
            if s.fd >= 0 { return (s.fd, fresh) }  // another thread reopened it first
            s.fd = fresh
            return (fresh, -1)
        }
        if spare >= 0 { Sys.close(spare) } else { DescriptorBudget.process.opened() }
        return fd
    }

    /// Opens a lazy node at its name, if that is still this file (else ESTALE: see LazyName).
    private func openLazily(_ l: LazyName) throws(Errno) -> Int32 {
        let pfd = try l.parent.acquire()
        defer { l.parent.release() }
        let fd = l.name.withName { openat(pfd, $0, Sys.O_PATH | Sys.O_NOFOLLOW | Sys.O_CLOEXEC) }
        guard fd >= 0 else {
            let e = Sys.lastErrno
            throw e == .noSuchFileOrDirectory || e == .notDirectory ? .staleNFSFileHandle : e
        }
        guard let st = try? Sys.stat(fd: fd), UInt64(st.st_dev) == dev, UInt64(st.st_ino) == ino else {
            Sys.close(fd)
            throw .staleNFSFileHandle
        }
        return fd
    }

    /// The attributes of a node not opened yet, stat'ed at its name without opening it; nil if
    /// it is open (or the name no longer leads to it: the caller then opens it, which tells).
    func statUnopened() -> stat? {
        guard let l = slot.withLock({ $0.fd < 0 && !$0.dead ? $0.lazy : nil }),
              let pfd = try? l.parent.acquire() else { return nil }
        defer { l.parent.release() }
        var st = stat()
        let r = l.name.withName { fstatat(pfd, $0, &st, Sys.AT_SYMLINK_NOFOLLOW) }
        guard r == 0, UInt64(st.st_dev) == dev, UInt64(st.st_ino) == ino else { return nil }
        return st
    }

    /// The node was just found at `lazy`: remember that place if it is still unopened.
    func seen(at lazy: LazyName) {
        slot.withLock { s in if case .lazy = s.way { s.way = .lazy(lazy) } }
    }

    func release() {
        guard kind == .backing else { return }
        let toClose: Int32 = slot.withLock { s in
            s.users -= 1
            guard s.users == 0, s.dead, s.fd >= 0 else { return -1 }
            defer { s.fd = -1 }
            return s.fd
        }
        if toClose >= 0 {
            Sys.close(toClose)
            DescriptorBudget.process.closed()
        }
    }

    /// See `closeReplaced`.
    var isReplaced: Bool { slot.withLock { $0.replaced } }

    func noteOpened() { slot.withLock { $0.opens += 1 } }
    func noteClosed() { slot.withLock { $0.opens -= 1 } }

    /// The node's file or folder was just removed through the mount (its last name): close the
    /// descriptor now if nothing uses it, so that the backing inode is freed inside this
    /// unlink or rmdir, as on a native folder. Held until the kernel's FORGET, the last close
    /// frees it later, on another thread, while `rm -rf` is already removing the parent
    /// folder, whose rmdir then spins in the kernel (shrink_dcache_parent waits for a child
    /// that is being freed) for milliseconds. A node still in use, or a file still open
    /// through the mount, keeps its descriptor (fstat of an open unlinked file must work).
    /// Afterwards the node answers ENOENT.
    func closeRemoved() {
        let fd: Int32 = slot.withLock { s in
            guard s.fd >= 0, s.users == 0, s.opens == 0, !s.dead else { return -1 }
            s.removed = true
            s.way = .none
            defer { s.fd = -1 }
            return s.fd
        }
        if fd >= 0 {
            Sys.close(fd)
            DescriptorBudget.process.closed()
        }
    }

    /// The node's file was moved elsewhere or replaced by a change the kernel did not make
    /// itself (a save through a reference moves the saved file into the store, over the old
    /// target): from now on it answers ESTALE, on which the kernel looks its path up again
    /// (LOOKUP_REVAL) and finds what is there now. A node in use or with open files keeps its
    /// descriptor for them; the others close it at once.
    func closeReplaced() {
        let fd: Int32 = slot.withLock { s in
            s.replaced = true
            s.way = .none
            guard s.fd >= 0, s.users == 0, s.opens == 0, !s.dead else { return -1 }
            defer { s.fd = -1 }
            return s.fd
        }
        if fd >= 0 {
            Sys.close(fd)
            DescriptorBudget.process.closed()
        }
    }

    /// The kernel forgot the node: close its descriptor now, or when the last user releases it.
    func retire() {
        let toClose: Int32 = slot.withLock { s in
            s.dead = true
            guard s.users == 0, s.fd >= 0 else { return -1 }
            defer { s.fd = -1 }
            return s.fd
        }
        if toClose >= 0 {
            Sys.close(toClose)
            DescriptorBudget.process.closed()
        }
    }

    /// Adopts a freshly opened descriptor for an evicted node (saves a reopen); false if not needed.
    func adopt(_ fd: Int32) -> Bool {
        let taken: Bool = slot.withLock { s in
            guard s.fd < 0, !s.dead else { return false }
            s.fd = fd
            s.dropLazy()
            s.referenced = true
            return true
        }
        if taken { DescriptorBudget.process.opened() }
        return taken
    }

    /// Closes the descriptor of an idle node, keeping a file handle to reopen it. A node used
    /// since the last sweep only loses its clock bit, unless `force`. True if it was closed.
    func evict(force: Bool, anchors: AnchorTable) -> Bool {
        guard kind == .backing else { return false }
        let fd: Int32 = slot.withLock { s in
            guard s.fd >= 0, s.users == 0, !s.dead, !s.pinned else { return -1 }
            if s.referenced && !force {
                s.referenced = false
                return -1
            }
            s.users += 1  // hold it while the handle is made
            return s.fd
        }
        guard fd >= 0 else { return false }
        var handle: [UInt8]? = slot.withLock { $0.handle }
        var anchor: Int32 = -1
        var ok = false
        if let st = try? Sys.stat(fd: fd), st.st_nlink > 0 {
            if handle == nil {
                var buf = [UInt8](repeating: 0, count: Int(DD_HANDLE_MAX))
                let len = buf.withUnsafeMutableBufferPointer { dd_name_to_handle(fd, $0.baseAddress, Int32($0.count)) }
                handle = len > 0 ? Array(buf[0..<Int(len)]) : nil
            }
            anchor = anchors.anchor(dev: dev, node: fd, isDirectory: isDirectory)
            if let handle, anchor >= 0 {
                ok = anchors.handlesWork(handle, anchor: anchor)
                if !anchors.handlesUsable { slot.withLock { $0.pinned = true } }
            }
        }
        let toClose: Int32 = slot.withLock { s in
            s.users -= 1
            if handle == nil { s.pinned = true }  // this filesystem has no file handles
            if let handle {
                // The first anchor stays (a handle is opened on the anchor it was checked with).
                if case .handle(_, let first) = s.way, first >= 0 { anchor = first }
                s.way = .handle(handle, anchor: anchor)
            } else if case .handle = s.way {
                s.way = .none
            }
            guard s.users == 0, s.fd >= 0, ok || s.dead else { return -1 }
            defer { s.fd = -1 }
            return s.fd
        }
        guard toClose >= 0 else { return false }
        Sys.close(toClose)
        DescriptorBudget.process.closed()
        return true
    }

    /// Where this node can be found again after the kernel forgets it (see InodeTable.Remembered):
    /// the handle it already has, its name if it was never opened, or a handle made from its
    /// descriptor (one name_to_handle_at, which does no I/O). Nil if removed or unreachable.
    func placeForRemembering() -> InodeTable.Remembered.Place? {
        enum What { case handle([UInt8]), fd(Int32), lazy(LazyName), none }
        let what: What = slot.withLock { s in
            if s.removed { return .none }
            if let h = s.handle { return .handle(h) }
            if s.fd >= 0 {
                s.users += 1
                return .fd(s.fd)
            }
            if let l = s.lazy { return .lazy(l) }
            return .none
        }
        switch what {
        case .handle(let h):
            return .handle(h)
        case .lazy(let l):
            return .name(parent: l.parent.nodeID, name: l.name)
        case .fd(let fd):
            defer { release() }
            var buf = [UInt8](repeating: 0, count: Int(DD_HANDLE_MAX))
            let len = buf.withUnsafeMutableBufferPointer { dd_name_to_handle(fd, $0.baseAddress, Int32($0.count)) }
            return len > 0 ? .handle(Array(buf[0..<Int(len)])) : nil
        case .none:
            return nil
        }
    }

    /// Closes the descriptor whatever its state (at unmount).
    func closeForShutdown() {
        let fd: Int32 = slot.withLock { s in
            s.dead = true
            defer { s.fd = -1 }
            return s.fd
        }
        if fd >= 0 {
            Sys.close(fd)
            DescriptorBudget.process.closed()
        }
    }
}

/// How many node descriptors are open, against a budget taken from the open-file limit.
final class DescriptorBudget: Sendable {
    private let count = Atomic<Int>(0)
    /// Above `high`, idle nodes are closed down to `low`.
    let high: Int
    let low: Int
    let sweeping = Atomic<Bool>(false)

    init(limit: Int) {
        high = max(64, limit)
        low = high * 3 / 4
    }

    /// The process's: the open-file limit is the process's, and a node does not keep a
    /// reference of its own to it (8 bytes of every node).
    static let process = DescriptorBudget.fromResourceLimit()

    /// Three quarters of the process's open-file limit: the rest is for open files, folders and
    /// the index. DOCDRIVE_NODE_FD_BUDGET overrides it (tests use a tiny budget to exercise
    /// reopening).
    private static func fromResourceLimit() -> DescriptorBudget {
        if let n = Tunables.process.nodeDescriptorBudget { return DescriptorBudget(limit: n) }
        var rl = rlimit()
        let cur = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &rl) == 0 ? Int(clamping: rl.rlim_cur) : 1024
        // Nodes may use three quarters of the limit; the rest is for open files and folders,
        // the index and uploads (with a limit of 20,000 that leaves 5,000).
        return DescriptorBudget(limit: cur / 4 * 3)
    }

    /// After a sweep that could not reach `low`: the count at which to try again.
    private let retryAt = Atomic<Int>(0)

    func opened() { count.add(1, ordering: .relaxed) }
    func closed() { count.subtract(1, ordering: .relaxed) }
    var open: Int { count.load(ordering: .relaxed) }
    var isOver: Bool {
        let n = open
        return n > high && n > retryAt.load(ordering: .relaxed)
    }
    func postpone() { retryAt.store(open + max(32, high / 8), ordering: .relaxed) }
}

/// One open folder per backing filesystem, which open_by_handle_at needs to find a node again.
final class AnchorTable: Sendable {
    private let anchors = Mutex<[UInt64: Int32]>([:])
    /// The filesystem anchored last: lets `ensure` skip the lock in the common case.
    private let lastDev = Atomic<UInt64>(UInt64.max)
    /// Whether open_by_handle_at works here (it needs CAP_DAC_READ_SEARCH): 0 unknown, 1 yes, 2 no.
    private let handles = Atomic<Int>(0)

    var handlesUsable: Bool { handles.load(ordering: .relaxed) != 2 }

    /// True if nodes can be reopened from handles; the first call tries it once with `handle`.
    func handlesWork(_ handle: [UInt8], anchor: Int32) -> Bool {
        switch handles.load(ordering: .relaxed) {
        case 1: return true
        case 2: return false
        default:
            let fd = handle.withUnsafeBufferPointer {
                dd_open_by_handle(anchor, $0.baseAddress, Int32($0.count), Sys.O_PATH | Sys.O_NOFOLLOW)
            }
            if fd >= 0 {
                Sys.close(fd)
                handles.store(1, ordering: .relaxed)
                return true
            }
            // EPERM without the capability (a daemon run by a user): keep every descriptor open.
            if dd_errno() == EPERM { handles.store(2, ordering: .relaxed) }
            return false
        }
    }

    /// Makes sure `dev` has an anchor, from the folder `node` (called for each new folder node).
    func ensure(dev: UInt64, folder node: Int32) {
        if lastDev.load(ordering: .relaxed) == dev { return }
        anchor(dev: dev, node: node, isDirectory: true)
        lastDev.store(dev, ordering: .relaxed)
    }

    /// The anchor for `dev`, made from `node` if it is a folder and there is none yet; -1 if none.
    @discardableResult
    func anchor(dev: UInt64, node: Int32, isDirectory: Bool) -> Int32 {
        if let a = anchors.withLock({ $0[dev] }) { return a }
        guard isDirectory else { return -1 }
        let fd = dd_reopen(node, O_RDONLY | Sys.O_DIRECTORY)
        guard fd >= 0 else { return -1 }
        let (a, spare): (Int32, Int32) = anchors.withLock { m in
            if let a = m[dev] { return (a, fd) }
            m[dev] = fd
            return (fd, -1)
        }
        if spare >= 0 { Sys.close(spare) }
        return a
    }

    func closeAll() {
        let all = anchors.withLock { m -> [Int32] in
            defer { m.removeAll() }
            return Array(m.values)
        }
        for fd in all { Sys.close(fd) }
    }
}

/// What identifies a version of a file's content for the page cache.
struct FileVersion: Equatable, Sendable {
    var mtime: timespec
    var ctime: timespec
    var size: Int

    init(_ st: stat) {
        mtime = st.st_mtim
        ctime = st.st_ctim
        size = st.st_size
    }

    static func == (a: FileVersion, b: FileVersion) -> Bool {
        a.size == b.size && a.mtime.tv_sec == b.mtime.tv_sec && a.mtime.tv_nsec == b.mtime.tv_nsec
            && a.ctime.tv_sec == b.ctime.tv_sec && a.ctime.tv_nsec == b.ctime.tv_nsec
    }
}

/// All nodes the kernel may name, by node id and by backing identity.
///
/// Locks: the table is in 64 parts (`shards`), each under one lock of its own, which holds
/// the nodes of the backing files that fall in it (by the file's dev and inode number): by
/// backing identity (`byKey`), by id with their lookup counts (`byID`), the forgotten ones
/// remembered, and the part's next id. A node id carries its part in its low bits, so a
/// request that finds its node by id (every request) and a LOOKUP or CREATE that finds or
/// makes it by backing file take the same one lock, and no lock is global. (With one lock
/// for everything, 76 % of the daemon's contended lock waits with 8 parallel writers were on
/// it; with the map by identity under one lock and the ids in parts, that lock still had the
/// most: 150 of 6,057 samples in `insertOrFind`.) A part's lock is a leaf, one part at a time,
/// never held for a system call (a forgotten node's place is read outside it).
final class InodeTable: Sendable {
    struct Key: Hashable {
        var view: View
        var dev: UInt64
        var ino: UInt64
        /// A reference file's node is not the same node as that file seen plainly.
        var isReference = false
    }

    /// A node the kernel forgot, kept so that a file handle the kernel gave out (the node id and
    /// generation 0, see FileSystem+Handles) leads to the same file as long as it exists, and
    /// so that the file keeps its node id when it is looked up again.
    struct Remembered {
        enum Place: @unchecked Sendable {  // see KeptName
            /// The backing file's own file handle (open_by_handle_at on the filesystem's anchor).
            case handle([UInt8])
            /// A file never opened: its name in a folder (a node id, live or remembered).
            /// A rename through the mount brings the node back first (the kernel looks the
            /// name up), so it is remembered at its new name; one behind the mount's back loses it.
            case name(parent: UInt64, name: KeptName)
            /// Being forgotten this moment: the place is still to be read from the node.
            case dying(Inode)
        }
        let key: Key
        let root: BackingRoot
        let fileType: mode_t
        let isTopLevel: Bool
        var place: Place
    }

    /// The live nodes by backing identity: a table of the nodes themselves, each found by the
    /// key it holds (8 bytes a bucket). It was a Dictionary of a key and an id, 24 bytes a
    /// bucket once the key was packed in 16 (40 before); with 100,000 nodes, 6.3 MB where this
    /// takes 2.1 (see ProbedTable).
    struct IdentityMap {
        private struct Keyed: ProbedElement {
            let node: Inode
            var probeHash: UInt64 { NodeSpread.hash(dev: node.dev, ino: node.ino) }
        }
        private var nodes = ProbedTable<Keyed>()
        /// Every view a node was ever made in (they only grow; an app's view is made at its
        /// first lookup): a backing folder's nodes are found by key in each.
        private(set) var views: [View] = [.unified]

        static func key(of n: Inode) -> Key {
            Key(view: n.view, dev: n.dev, ino: n.ino, isReference: n.reference != nil)
        }

        private func bucket(_ k: Key) -> Int? {
            nodes.find(hash: NodeSpread.hash(dev: k.dev, ino: k.ino)) { e in
                let n = e.node
                return n.ino == k.ino && n.dev == k.dev && (n.reference != nil) == k.isReference && n.view == k.view
            }
        }

        subscript(key: Key) -> Inode? {
            bucket(key).map { nodes[bucket: $0].node }
        }

        /// Makes `node` the one that stands for its own key (in place of another).
        mutating func stand(_ node: Inode) {
            let k = Self.key(of: node)
            if let b = bucket(k) {
                nodes[bucket: b] = Keyed(node: node)
                return
            }
            if case .app = k.view, !views.contains(k.view) { views.append(k.view) }
            nodes.insertNew(Keyed(node: node))
        }

        /// Removes the node that stands for `key`, and returns it.
        mutating func removeValue(forKey key: Key) -> Inode? {
            guard let b = bucket(key) else { return nil }
            return nodes.remove(bucket: b).node
        }

        /// Removes `node` if it is the one that stands for its key; false if it is not.
        @discardableResult
        mutating func remove(_ node: Inode) -> Bool {
            guard let b = bucket(Self.key(of: node)), nodes[bucket: b].node === node else { return false }
            nodes.remove(bucket: b)
            return true
        }

        mutating func removeAll() { nodes.removeAll() }
    }

    /// The live nodes of one shard by id, with their lookup counts: 16 bytes a bucket (a
    /// Dictionary's was 24). Ids are handed out in order, and the table's Fibonacci hashing
    /// spreads ids in order evenly, so a lookup by id is most often one bucket; so the table
    /// may be fuller than one of random hashes before it grows.
    struct NodesByID {
        struct Entry: ProbedElement {
            var inode: Inode
            var lookups: UInt64
            var probeHash: UInt64 { inode.nodeID >> InodeTable.shardBits }
            /// Live ids mostly lie in a window smaller than the table, one bucket each.
            static var fullAtEighths: Int { 7 }
        }
        private var table = ProbedTable<Entry>()

        private func bucket(_ id: UInt64) -> Int? {
            table.find(hash: id >> InodeTable.shardBits) { $0.inode.nodeID == id }
        }

        subscript(id: UInt64) -> Inode? {
            bucket(id).map { table[bucket: $0].inode }
        }

        /// A node not here (a new id, or one forgotten and brought back), with one lookup.
        mutating func insert(_ inode: Inode) {
            table.insertNew(Entry(inode: inode, lookups: 1))
        }

        /// One more lookup of node `id`; nil if it is not here.
        mutating func addLookup(_ id: UInt64) -> Inode? {
            guard let b = bucket(id) else { return nil }
            table[bucket: b].lookups += 1
            return table[bucket: b].inode
        }

        /// The kernel forgets `n` lookups of node `id`: the node, removed, when none remain.
        mutating func dropLookups(_ id: UInt64, _ n: UInt64) -> Inode? {
            guard let b = bucket(id) else { return nil }
            if table[bucket: b].lookups > n {
                table[bucket: b].lookups -= n
                return nil
            }
            return table.remove(bucket: b).inode
        }

        var count: Int { table.count }
        var values: some Sequence<Entry> { table.elements }
        mutating func removeAll() { table.removeAll() }
    }

    /// The forgotten nodes remembered (see Remembered), by id and by backing identity, oldest
    /// first. One object each (a 96-byte block), found from two tables of 8-byte buckets: two
    /// Dictionaries of the whole record and of the key (an 80-byte and a 48-byte bucket) made a
    /// forgotten node cost about 330 bytes, so that the daemon grew from 71 to 108 MB when the
    /// kernel forgot a walk of 100,000 files.
    struct RememberedNodes {
        /// A remembered node's fields, in the order of their size (no padding between them).
        private final class Record {
            let id: UInt64
            let dev: UInt64
            let ino: UInt64
            let view: View
            let root: BackingRoot
            var place: Remembered.Place
            let fileType: mode_t
            let isTopLevel: Bool
            /// Found by its key too (it stood for its key when it was forgotten, and no node
            /// remembered later took the key).
            var byKey: Bool

            init(id: UInt64, _ r: Remembered, byKey: Bool) {
                self.id = id
                dev = r.key.dev
                ino = r.key.ino
                view = r.key.view
                root = r.root
                place = r.place
                fileType = r.fileType
                isTopLevel = r.isTopLevel
                self.byKey = byKey
            }

            var remembered: Remembered {
                Remembered(key: Key(view: view, dev: dev, ino: ino), root: root, fileType: fileType,
                           isTopLevel: isTopLevel, place: place)
            }
        }
        private struct ByID: ProbedElement {
            let record: Record
            var probeHash: UInt64 { record.id }
            static var fullAtEighths: Int { 7 }
        }
        private struct ByKey: ProbedElement {
            let record: Record
            var probeHash: UInt64 { NodeSpread.hash(dev: record.dev, ino: record.ino) }
        }
        private var byID = ProbedTable<ByID>()
        private var byKey = ProbedTable<ByKey>()
        /// Remembered ids, oldest first from `oldest`: beyond the limit the oldest go.
        private var order: [UInt64] = []
        private var oldest = 0

        var count: Int { byID.count }

        private func bucket(_ id: UInt64) -> Int? { byID.find(hash: id) { $0.record.id == id } }

        private func bucket(_ k: Key) -> Int? {
            guard !k.isReference, byKey.count > 0 else { return nil }  // a reference's node is never remembered
            return byKey.find(hash: NodeSpread.hash(dev: k.dev, ino: k.ino)) { e in
                let r = e.record
                return r.ino == k.ino && r.dev == k.dev && r.view == k.view
            }
        }

        subscript(id: UInt64) -> Remembered? {
            bucket(id).map { byID[bucket: $0].record.remembered }
        }

        /// The place of a node being forgotten, now read (a node not remembered is left so).
        mutating func setPlace(_ id: UInt64, _ place: Remembered.Place) {
            if let b = bucket(id) { byID[bucket: b].record.place = place }
        }

        /// The id remembered for `key`, no longer remembered (the file is looked up again).
        mutating func take(key: Key) -> UInt64? {
            guard let b = bucket(key) else { return nil }
            let id = byKey[bucket: b].record.id
            drop(id)
            return id
        }

        /// Forgets the node remembered for `key` (its handles go stale).
        mutating func drop(key: Key) {
            if let b = bucket(key) { drop(byKey[bucket: b].record.id) }
        }

        mutating func drop(_ id: UInt64) {
            guard let b = bucket(id) else { return }
            let r = byID.remove(bucket: b).record
            if r.byKey, let k = byKey.find(hash: NodeSpread.hash(dev: r.dev, ino: r.ino), { $0.record === r }) {
                byKey.remove(bucket: k)
            }
        }

        mutating func remember(_ id: UInt64, _ r: Remembered, byKey inKeyTable: Bool, limit: Int) {
            drop(id)
            if inKeyTable, let b = bucket(r.key) {  // an older node of the file stays found by its id only
                byKey.remove(bucket: b).record.byKey = false
            }
            let record = Record(id: id, r, byKey: inKeyTable)
            byID.insertNew(ByID(record: record))
            if inKeyTable { byKey.insertNew(ByKey(record: record)) }
            order.append(id)
            while count > limit, oldest < order.count {
                drop(order[oldest])
                oldest += 1
            }
            if oldest > 4096, oldest * 2 > order.count {
                order.removeFirst(oldest)
                oldest = 0
            }
            // Nodes forgotten, brought back and forgotten again appear more than once: keep
            // each id's latest place only, now and then (linear, amortised over `limit` forgets).
            if order.count - oldest > 2 * limit + 4096 {
                var kept = Set<UInt64>()
                let latest = order[oldest...].reversed().filter { bucket($0) != nil && kept.insert($0).inserted }
                order = latest.reversed()
                oldest = 0
            }
        }

        mutating func removeAll() {
            byID.removeAll()
            byKey.removeAll()
            order = []
            oldest = 0
        }
    }

    /// One part of the table: the nodes of the backing files whose identity falls in it, by
    /// identity and by id, with their lookup counts, and the forgotten ones remembered. A node
    /// id names its part (its low `shardBits` bits), so a request that finds its node by id and
    /// one that finds it by backing file take the same single lock.
    private struct ShardState: ~Copyable {
        var byKey = IdentityMap()
        var byID = NodesByID()
        var remembered = RememberedNodes()
        /// The next id of this part, without its part's bits.
        var nextSerial: UInt64 = InodeTable.firstSerial
    }
    private final class Shard: Sendable {
        let state = Mutex(ShardState())
    }
    static let shardBits: UInt64 = 6
    private static let shardCount = 1 << shardBits
    /// Node ids of backing files start at 2^20 (below are the permanent virtual nodes').
    private static let firstSerial: UInt64 = 1 << (20 - shardBits)
    private let shards: [Shard] = (0..<InodeTable.shardCount).map { _ in Shard() }
    /// The part of node `id` (the one it was made in).
    @inline(__always)
    private func shard(_ id: UInt64) -> Shard { shards[Int(id & UInt64(Self.shardCount - 1))] }
    /// The part of a backing file: every view of it, and every node it ever had, is there.
    @inline(__always)
    private func shardIndex(dev: UInt64, ino: UInt64) -> Int {
        NodeSpread.part(dev: dev, ino: ino, bits: Self.shardBits)
    }
    @inline(__always)
    private func shard(dev: UInt64, ino: UInt64) -> Shard { shards[shardIndex(dev: dev, ino: ino)] }
    /// Every live node (a snapshot, part by part).
    private func allLive() -> [Inode] {
        var all = [Inode]()
        for sh in shards { sh.state.withLock { all.append(contentsOf: $0.byID.values.lazy.map(\.inode)) } }
        return all
    }
    /// How many forgotten nodes each part remembers (the limit spread over the parts, which
    /// backing files fall in evenly).
    private var rememberLimitPerShard: Int {
        rememberLimit == 0 ? 0 : (rememberLimit + Self.shardCount - 1) / Self.shardCount
    }
    /// Virtual nodes live for the whole mount and are never forgotten.
    private let permanent = Mutex<[UInt64: Inode]>([:])
    /// The process's descriptor budget (`DescriptorBudget.process`), which nodes also count
    /// against directly (they keep no reference to the table).
    var budget: DescriptorBudget { .process }
    private let anchors = AnchorTable()
    /// The backing folders of the nodes, watched for the kernel's cache (see KernelCacheWatch).
    let kernelWatch = KernelCacheWatch()
    /// How many forgotten nodes are remembered (measured: about 130 bytes each, so 34 MB at
    /// most; 330 before RememberedNodes); beyond it the oldest handles go stale.
    /// DOCDRIVE_REMEMBERED_NODES overrides it.
    let rememberLimit: Int

    init() {
        rememberLimit = Tunables.process.rememberedNodes
    }

    func addPermanent(_ inode: Inode) {
        permanent.withLock { $0[inode.nodeID] = inode }
    }

    func nextPermanentID() -> UInt64 {
        permanent.withLock { UInt64(2 + $0.count) }
    }

    @inline(__always)
    func get(_ id: UInt64) -> Inode? {
        if let e = shard(id).state.withLock({ $0.byID[id] }) { return e }
        return permanent.withLock { $0[id] }
    }

    /// Returns the inode for a backing file, creating it if new, and counts one lookup.
    /// Takes ownership of `fd`: closes it when an inode for the same file already exists.
    /// `fd`: the node's O_PATH descriptor, or -1 with `lazy` for a regular file to open on
    /// first use (a node already known then only learns where it was seen).
    func insertOrFind(fd: Int32, st: stat, root: BackingRoot, view: View, isTopLevel: Bool,
                      reference: ReferenceLink? = nil, lazy: Inode.LazyName? = nil) -> Inode {
        let key = Key(view: view, dev: UInt64(st.st_dev), ino: UInt64(st.st_ino), isReference: reference != nil)
        let part = shardIndex(dev: key.dev, ino: key.ino)
        let (inode, duplicate): (Inode, Bool) = shards[part].state.withLock { s in
            if let known = s.byKey[key], let found = s.byID.addLookup(known.nodeID) {
                return (found, true)
            }
            // A file the kernel forgot gets its node id back (a file handle names it by that id).
            let id: UInt64
            if let old = s.remembered.take(key: key) {
                id = old
            } else {
                id = s.nextSerial << Self.shardBits | UInt64(part)
                s.nextSerial += 1
            }
            let inode = Inode(nodeID: id, kind: .backing, fd: fd, dev: key.dev, ino: key.ino,
                              fileType: st.st_mode & S_IFMT, root: root, view: view, isTopLevel: isTopLevel,
                              reference: reference, lazy: fd < 0 ? lazy : nil)
            s.byID.insert(inode)
            s.byKey.stand(inode)
            return (inode, false)
        }
        if duplicate {
            if fd < 0 {
                if let lazy { inode.seen(at: lazy) }
            } else if !inode.adopt(fd) {
                Sys.close(fd)
            }
        } else if fd >= 0 {
            budget.opened()
            // Every filesystem met gets an anchor from its first folder, so that any of its
            // nodes can be closed and reopened by handle.
            if inode.isDirectory { anchors.ensure(dev: key.dev, folder: fd) }
        }
        if budget.isOver { sweep() }
        return inode
    }

    /// Closes idle nodes' descriptors until the budget's low mark (one sweeper at a time; the
    /// others go on). Nodes used since the last sweep are spared on the first pass.
    func sweep() {
        guard anchors.handlesUsable else { return budget.postpone() }
        guard budget.sweeping.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged else { return }
        defer { budget.sweeping.store(false, ordering: .releasing) }
        let nodes = allLive()
        for force in [false, true] {
            for n in nodes {
                if budget.open <= budget.low { return }
                _ = n.evict(force: force, anchors: anchors)
            }
        }
        // Nothing more could close (busy, deleted, no file handles): do not sweep on every
        // lookup from here on, only once the count has grown again.
        budget.postpone()
    }

    /// A file or folder was removed through the mount (its last name): see `Inode.closeRemoved`.
    /// The node also stops standing for its (dev, ino) at once, not only when the kernel's
    /// forget arrives: the backing filesystem hands the inode number to the next file it
    /// creates, and a lookup of that file in between must get a node of its own.
    /// Its handles go stale too (a forgotten node of it is no longer remembered).
    func removed(view: View, dev: UInt64, ino: UInt64) {
        let key = Key(view: view, dev: dev, ino: ino, isReference: false)
        shard(dev: dev, ino: ino).state.withLock { s -> Inode? in
            s.remembered.drop(key: key)
            return s.byKey.removeValue(forKey: key)
        }?.closeRemoved()
    }

    /// The file (dev, ino) was moved or replaced behind the kernel's back: its plain nodes in
    /// every view stop standing for it and answer ESTALE (see `Inode.closeReplaced`). Scans
    /// the file's part of the table: only editors' saves through references come here.
    func replacedBehind(dev: UInt64, ino: UInt64) {
        let nodes = shard(dev: dev, ino: ino).state.withLock { s -> [Inode] in
            let found = s.byID.values.map(\.inode).filter { n in n.dev == dev && n.ino == ino && n.reference == nil }
            for n in found {
                let key = Key(view: n.view, dev: dev, ino: ino, isReference: false)
                s.byKey.remove(n)
                s.remembered.drop(key: key)
            }
            return found
        }
        for n in nodes { n.closeReplaced() }
    }

    /// A file moved to `name` in `parent`: its node, if it was never opened, is to be opened there.
    func seen(view: View, dev: UInt64, ino: UInt64, at parent: Inode, _ name: UnsafePointer<CChar>) {
        let key = Key(view: view, dev: dev, ino: ino, isReference: false)
        // (A forgotten node needs nothing: the kernel looks the source up before a rename,
        // which brings the node back under its id, and it is remembered again at its new name.)
        guard let inode = shard(dev: dev, ino: ino).state.withLock({ $0.byKey[key] }) else { return }
        inode.seen(at: Inode.LazyName(parent: parent, name))
    }

    /// Counts one more lookup of a node already known (readdirplus of a cached entry, link).
    /// False if the node is no longer in the table (forgotten meanwhile).
    @discardableResult
    func addLookup(_ inode: Inode) -> Bool {
        shard(inode.nodeID).state.withLock { $0.byID.addLookup(inode.nodeID) != nil }
    }

    /// The kernel forgets `n` lookups; the inode and its descriptor go when none remain.
    func forget(_ id: UInt64, _ n: UInt64) {
        forget(CollectionOfOne((id, n)))
    }

    /// Several forgets (a BATCH_FORGET), each under its part's lock; descriptors close outside
    /// it. A forgotten backing node is remembered (see Remembered): its place is read outside
    /// the lock, before its descriptor closes.
    func forget(_ batch: some Collection<(UInt64, UInt64)>) {
        var dead = [Inode]()
        let limit = rememberLimitPerShard
        for (id, n) in batch {
            shard(id).state.withLock { s in
                guard let inode = s.byID.dropLookups(id, n) else { return }
                let key = IdentityMap.key(of: inode)
                let owned = s.byKey.remove(inode)
                dead.append(inode)
                if limit > 0, inode.kind == .backing, inode.reference == nil, let root = inode.root {
                    s.remembered.remember(id, Remembered(key: key, root: root, fileType: inode.fileType, isTopLevel: inode.isTopLevel,
                                              place: .dying(inode)), byKey: owned, limit: limit)
                }
            }
        }
        if dead.isEmpty { return }
        for inode in dead {
            let wd = inode.watch.exchange(-1, ordering: .relaxed)
            if wd >= 0 { kernelWatch.remove(wd) }
        }
        guard limit > 0 else {
            for inode in dead { inode.retire() }
            return
        }
        for inode in dead {
            let id = inode.nodeID
            let place = inode.kind == .backing && inode.reference == nil ? inode.placeForRemembering() : nil
            inode.retire()
            guard inode.kind == .backing, inode.reference == nil else { continue }
            shard(id).state.withLock { s in
                guard case .dying? = s.remembered[id]?.place else { return }  // revived or dropped meanwhile
                if let place { s.remembered.setPlace(id, place) } else { s.remembered.drop(id) }
            }
        }
    }

    /// Brings back a node the kernel forgot, under its old id, with one lookup counted (the
    /// kernel's LOOKUP of "." for a file handle). ESTALE if the file is gone or unknown.
    func revive(_ id: UInt64) throws(Errno) -> (Inode, stat) {
        let (fd, st, r) = try openRemembered(id, depth: 0)
        let (inode, spare): (Inode, Int32) = shard(id).state.withLock { s in
            if let e = s.byID.addLookup(id) {  // revived by another request meanwhile
                return (e, fd)
            }
            let inode = Inode(nodeID: id, kind: .backing, fd: fd, dev: r.key.dev, ino: r.key.ino, fileType: r.fileType,
                              root: r.root, view: r.key.view, isTopLevel: r.isTopLevel)
            s.byID.insert(inode)
            if s.byKey[r.key] == nil { s.byKey.stand(inode) }
            s.remembered.drop(id)
            return (inode, -1)
        }
        if spare >= 0 { Sys.close(spare) } else { budget.opened() }
        return (inode, st)
    }

    /// An O_PATH descriptor of the file a node id stood for, checked to be that file and not
    /// removed. Its folder may be a forgotten node too (`depth` bounds the climb).
    private func openRemembered(_ id: UInt64, depth: Int) throws(Errno) -> (Int32, stat, Remembered) {
        guard depth < 512, let r = shard(id).state.withLock({ $0.remembered[id] }) else { throw .staleNFSFileHandle }
        var place = r.place
        if case .dying(let inode) = place {
            guard let p = inode.placeForRemembering() else { throw .staleNFSFileHandle }
            place = p
        }
        let fd: Int32
        switch place {
        case .handle(let h):
            let anchor = anchors.anchor(dev: r.key.dev, node: -1, isDirectory: false)
            guard anchor >= 0 else { throw .staleNFSFileHandle }
            fd = h.withUnsafeBufferPointer { dd_open_by_handle(anchor, $0.baseAddress, Int32($0.count), Sys.O_PATH | Sys.O_NOFOLLOW) }
        case .name(let parentID, let name):
            let open = { (pfd: Int32) in name.withName { openat(pfd, $0, Sys.O_PATH | Sys.O_NOFOLLOW | Sys.O_CLOEXEC) } }
            if let p = get(parentID) {
                let pfd = try p.acquire()
                fd = open(pfd)
                p.release()
            } else {
                let (pfd, _, _) = try openRemembered(parentID, depth: depth + 1)
                fd = open(pfd)
                Sys.close(pfd)
            }
        case .dying:
            throw .staleNFSFileHandle
        }
        guard fd >= 0 else { throw .staleNFSFileHandle }
        guard let st = try? Sys.stat(fd: fd), UInt64(st.st_dev) == r.key.dev, UInt64(st.st_ino) == r.key.ino,
              st.st_nlink > 0, st.st_mode & S_IFMT == r.fileType else {
            Sys.close(fd)
            throw .staleNFSFileHandle
        }
        return (fd, st, r)
    }

    var count: Int { shards.reduce(0) { n, sh in n + sh.state.withLock { $0.byID.count } } }


    /// The live node of a backing file in the unified view (the view whose entries and
    /// attributes the kernel may keep long), nil if the kernel holds none.
    func unifiedNode(dev: UInt64, ino: UInt64) -> Inode? {
        let key = Key(view: .unified, dev: dev, ino: ino, isReference: false)
        return shard(dev: dev, ino: ino).state.withLock { $0.byKey[key] }
    }

    /// Every live node (for an overflow of the kernel cache's watch).
    var liveNodes: [Inode] { allLive() }

    /// The node ids the kernel knows for a backing folder (one per view), for invalidations:
    /// one lookup by key per view (a scan of every live node cost each file a sync brought
    /// down a walk of 100,000 nodes when the kernel held a large tree).
    func nodeIDs(dev: UInt64, ino: UInt64) -> [UInt64] {
        shard(dev: dev, ino: ino).state.withLock { s in
            s.byKey.views.compactMap { s.byKey[Key(view: $0, dev: dev, ino: ino, isReference: false)]?.nodeID }
        }
    }

    /// Closes every descriptor (at unmount).
    func removeAll() {
        kernelWatch.stop()
        var all = [Inode]()
        for sh in shards {
            sh.state.withLock { s in
                all.append(contentsOf: s.byID.values.map(\.inode))
                s.byID.removeAll()
                s.byKey.removeAll()
                s.remembered.removeAll()
            }
        }
        for i in all { i.closeForShutdown() }
        anchors.closeAll()
    }
}


/// The files open through the mount, by backing file (dev, ino): what the sync engine asks
/// (is it open, open for writing, written since its last fsync) is one dictionary lookup, not a
/// scan of every node the kernel knows (with 100,000 nodes, two scans per upload made a fresh
/// mount's first listing 3.6 times slower). One per process: the key is the backing file's.
/// In parts by backing file, each with its own lock: every open and every close of every file
/// came through one lock (with the node table's ids and the passthrough table sharded, it had
/// the most contended waits left with 8 parallel writers after the node table's one global lock,
/// since sharded too).
/// Lock: leaf, one part at a time (an inode's `fsyncedVersion` is read after it is dropped).
final class OpenFiles: Sendable {
    static let shared = OpenFiles()

    private struct FileKey: Hashable {
        let dev: UInt64
        let ino: UInt64
    }

    private struct Opens {
        var all = 0
        var writers = [Inode]()
    }

    private final class Shard: Sendable {
        let state = Mutex<[FileKey: Opens]>([:])
    }
    private static let shardCount = 16
    private let shards: [Shard] = (0..<OpenFiles.shardCount).map { _ in Shard() }
    @inline(__always)
    private func shard(dev: UInt64, ino: UInt64) -> Shard {
        shards[Int((ino ^ (dev &* 0x9E37_79B9)) % UInt64(Self.shardCount))]
    }

    func opened(_ inode: Inode, writable: Bool) {
        shard(dev: inode.dev, ino: inode.ino).state.withLock { s in
            var o = s[FileKey(dev: inode.dev, ino: inode.ino), default: Opens()]
            o.all += 1
            if writable { o.writers.append(inode) }
            s[FileKey(dev: inode.dev, ino: inode.ino)] = o
        }
    }

    func closed(_ inode: Inode, writable: Bool) {
        shard(dev: inode.dev, ino: inode.ino).state.withLock { s in
            let k = FileKey(dev: inode.dev, ino: inode.ino)
            guard var o = s[k] else { return }
            o.all -= 1
            if writable, let i = o.writers.firstIndex(where: { $0 === inode }) { o.writers.remove(at: i) }
            s[k] = o.all > 0 ? o : nil
        }
    }

    /// Whether a process has the backing file open through the mount at all.
    func isOpen(dev: UInt64, ino: UInt64) -> Bool {
        shard(dev: dev, ino: ino).state.withLock { $0[FileKey(dev: dev, ino: ino)] != nil }
    }

    /// Whether a process has the backing file (dev, ino) open for writing through the mount.
    func isOpenForWriting(dev: UInt64, ino: UInt64) -> Bool {
        shard(dev: dev, ino: ino).state.withLock { $0[FileKey(dev: dev, ino: ino)]?.writers.isEmpty == false }
    }

    /// Runs `body` (which renames over or unlinks the backing file) only if no process has the
    /// file open for writing through the mount, under the part's lock, so that no open counts
    /// itself in between: an open after it finds the file unlinked. The body is one system call
    /// on the backing folder and takes no lock of the drive's.
    func unlessOpenForWriting(dev: UInt64, ino: UInt64, _ body: () -> Void) -> Bool {
        shard(dev: dev, ino: ino).state.withLock { s in
            guard s[FileKey(dev: dev, ino: ino)]?.writers.isEmpty != false else { return false }
            body()
            return true
        }
    }

    /// Open for writing through the mount and changed since its last fsync (`st`: as it is now).
    func hasUnsyncedWrites(_ st: stat) -> Bool {
        let dev = UInt64(st.st_dev), ino = UInt64(st.st_ino)
        let writers = shard(dev: dev, ino: ino).state.withLock { $0[FileKey(dev: dev, ino: ino)]?.writers ?? [] }
        guard !writers.isEmpty else { return false }
        let version = FileVersion(st)
        return writers.contains { $0.fsyncedVersion.withLock { $0 } != version }
    }
}
