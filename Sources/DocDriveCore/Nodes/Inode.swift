// Inode: the nodes the kernel knows (virtual folders and backing files), their descriptors, and
// the version of a file's content they keep.
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

    /// A regular file looked up but not opened (most looked-up files are only stat'ed): its
    /// folder's node and its name there. The first use opens it and checks that the name
    /// still leads to the same file; if not, it answers ESTALE, which makes the kernel look
    /// the path up again (LOOKUP_REVAL) and find whatever is there now.
    package struct LazyName: @unchecked Sendable {  // see KeptName
        let parent: Inode
        let name: KeptName

        package init(parent: Inode, _ name: UnsafePointer<CChar>) {
            self.parent = parent
            self.name = KeptName.make(name)
        }
    }

    // The stored fields are ordered by size (a class is laid out in the order written), so
    // that no padding lies between them: 135 bytes, a 144-byte allocation (256 when they were
    // in the order of their meaning; 208 while the kind and the view carried an app id's
    // string, the versions had a lock of their own and each node referred to the descriptor
    // budget; 160 while the slot had a field for the name and one for the handle, and the file
    // type took 4 bytes); every node the kernel holds has one. Measured (the class's instance
    // size in its metadata): 135 with a 39-byte slot, as with the 41-byte one before its marks
    // were one byte (the 2 bytes saved are padding before `watch` now).
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

    package init(nodeID: UInt64, kind: Kind, fd: Int32 = -1, dev: UInt64 = 0, ino: UInt64 = 0,
         fileType: mode_t = S_IFDIR, root: BackingRoot? = nil, view: View = .unified, isTopLevel: Bool = false,
         reference: ReferenceLink? = nil, lazy: LazyName? = nil) {
        self.reference = reference
        self.nodeID = nodeID
        self.kind = kind
        self.slot = Mutex(Slot(fd: fd, lazy: lazy))
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
        let next = slot.withLock { $0.use() }
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
        let (fd, spare) = slot.withLock { $0.reopen(with: fresh) }
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
        guard let l = slot.withLock({ $0.life == .unopened ? $0.lazy : nil }),
              let pfd = try? l.parent.acquire() else { return nil }
        defer { l.parent.release() }
        var st = stat()
        let r = l.name.withName { fstatat(pfd, $0, &st, Sys.AT_SYMLINK_NOFOLLOW) }
        guard r == 0, UInt64(st.st_dev) == dev, UInt64(st.st_ino) == ino else { return nil }
        return st
    }

    /// The node was just found at `lazy`: remember that place if it is still unopened.
    func seen(at lazy: LazyName) {
        slot.withLock { $0.seen(at: lazy) }
    }

    func release() {
        guard kind == .backing else { return }
        let toClose = slot.withLock { $0.release() }
        if toClose >= 0 {
            Sys.close(toClose)
            DescriptorBudget.process.closed()
        }
    }

    /// See `closeReplaced`.
    var isReplaced: Bool { slot.withLock { $0.replaced } }

    func noteOpened() { slot.withLock { $0.fileOpened() } }
    func noteClosed() { slot.withLock { $0.fileClosed() } }

    /// The node's file or folder was just removed through the mount (its last name): close the
    /// descriptor now if nothing uses it, so that the backing inode is freed inside this
    /// unlink or rmdir, as on a native folder. Held until the kernel's FORGET, the last close
    /// frees it later, on another thread, while `rm -rf` is already removing the parent
    /// folder, whose rmdir then spins in the kernel (shrink_dcache_parent waits for a child
    /// that is being freed) for milliseconds. A node still in use, or a file still open
    /// through the mount, keeps its descriptor (fstat of an open unlinked file must work).
    /// Afterwards the node answers ENOENT.
    func closeRemoved() {
        let fd = slot.withLock { $0.remove() }
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
        let fd = slot.withLock { $0.replaceBehind() }
        if fd >= 0 {
            Sys.close(fd)
            DescriptorBudget.process.closed()
        }
    }

    /// The kernel forgot the node: close its descriptor now, or when the last user releases it.
    func retire() {
        let toClose = slot.withLock { $0.forget() }
        if toClose >= 0 {
            Sys.close(toClose)
            DescriptorBudget.process.closed()
        }
    }

    /// Adopts a freshly opened descriptor for an evicted node (saves a reopen); false if not needed.
    func adopt(_ fd: Int32) -> Bool {
        let taken = slot.withLock { $0.adopt(fd) }
        if taken { DescriptorBudget.process.opened() }
        return taken
    }

    /// Closes the descriptor of an idle node, keeping a file handle to reopen it. A node used
    /// since the last sweep only loses its clock bit, unless `force`. True if it was closed.
    func evict(force: Bool, anchors: AnchorTable) -> Bool {
        guard kind == .backing else { return false }
        let fd = slot.withLock { $0.beginEviction(force: force) }  // held while the handle is made
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
                if !anchors.handlesUsable { slot.withLock { $0.pin() } }
            }
        }
        let toClose = slot.withLock { $0.endEviction(handle: handle, anchor: anchor, works: ok) }
        guard toClose >= 0 else { return false }
        Sys.close(toClose)
        DescriptorBudget.process.closed()
        return true
    }

    /// Where this node can be found again after the kernel forgets it (see InodeTable.Remembered):
    /// the handle it already has, its name if it was never opened, or a handle made from its
    /// descriptor (one name_to_handle_at, which does no I/O). Nil if removed or unreachable.
    func placeForRemembering() -> InodeTable.Remembered.Place? {
        switch slot.withLock({ $0.holdToRemember() }) {
        case .handle(let h):
            return .handle(h)
        case .name(let l):
            return .name(parent: l.parent.nodeID, name: l.name)
        case .held(let fd):
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
        let fd = slot.withLock { $0.shutDown() }
        if fd >= 0 {
            Sys.close(fd)
            DescriptorBudget.process.closed()
        }
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
