// Inode: the nodes the kernel knows (virtual folders and backing files) and the table that owns them.
import Synchronization
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
public enum View: Hashable, Sendable {
    case unified
    case app(String)
}

/// A node the kernel holds a reference to.
public final class Inode: Sendable {
    public enum Kind: Sendable, Equatable {
        case root
        case byApp
        case appView(String)
        case backing
    }

    public let nodeID: UInt64
    public let kind: Kind
    /// O_PATH descriptor of the backing file (-1 for virtual nodes). Follows renames; never
    /// resolves symlinks, so no request can walk out of its backing folder.
    let fd: Int32
    let dev: UInt64
    let ino: UInt64
    /// S_IFMT bits of the backing file.
    let fileType: mode_t
    let root: BackingRoot?
    let view: View
    /// True for the backing folder shown at the top of a view (it cannot be renamed or removed).
    let isTopLevel: Bool

    /// Content version (mtime, ctime, size) the kernel's page cache holds, to decide keep_cache.
    let cachedVersion = Mutex<FileVersion?>(nil)

    init(nodeID: UInt64, kind: Kind, fd: Int32 = -1, dev: UInt64 = 0, ino: UInt64 = 0,
         fileType: mode_t = S_IFDIR, root: BackingRoot? = nil, view: View = .unified, isTopLevel: Bool = false) {
        self.nodeID = nodeID
        self.kind = kind
        self.fd = fd
        self.dev = dev
        self.ino = ino
        self.fileType = fileType
        self.root = root
        self.view = view
        self.isTopLevel = isTopLevel
    }

    var isDirectory: Bool { fileType == S_IFDIR }
    var isSymlink: Bool { fileType == S_IFLNK }
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
/// Lock: `state` protects both maps and every lookup count; it is a leaf lock (nothing else is
/// taken while it is held) and is held only for dictionary work, never for a system call.
final class InodeTable: Sendable {
    struct Key: Hashable {
        var view: View
        var dev: UInt64
        var ino: UInt64
    }

    private struct Entry {
        var inode: Inode
        var lookups: UInt64
    }

    private struct State: ~Copyable {
        var byID: [UInt64: Entry] = [:]
        var byKey: [Key: UInt64] = [:]
        var nextID: UInt64 = 1 << 20
    }

    private let state = Mutex(State())
    /// Virtual nodes live for the whole mount and are never forgotten.
    private let permanent = Mutex<[UInt64: Inode]>([:])

    func addPermanent(_ inode: Inode) {
        permanent.withLock { $0[inode.nodeID] = inode }
    }

    func permanentNodes() -> [Inode] {
        permanent.withLock { Array($0.values) }
    }

    func nextPermanentID() -> UInt64 {
        permanent.withLock { UInt64(2 + $0.count) }
    }

    @inline(__always)
    func get(_ id: UInt64) -> Inode? {
        if let e = state.withLock({ $0.byID[id]?.inode }) { return e }
        return permanent.withLock { $0[id] }
    }

    /// Returns the inode for a backing file, creating it if new, and counts one lookup.
    /// Takes ownership of `fd`: closes it when an inode for the same file already exists.
    func insertOrFind(fd: Int32, st: stat, root: BackingRoot, view: View, isTopLevel: Bool) -> Inode {
        let key = Key(view: view, dev: UInt64(st.st_dev), ino: UInt64(st.st_ino))
        let (inode, duplicate): (Inode, Bool) = state.withLock { s in
            if let id = s.byKey[key], var e = s.byID[id] {
                e.lookups += 1
                s.byID[id] = e
                return (e.inode, true)
            }
            let id = s.nextID
            s.nextID += 1
            let inode = Inode(nodeID: id, kind: .backing, fd: fd, dev: key.dev, ino: key.ino,
                              fileType: st.st_mode & S_IFMT, root: root, view: view, isTopLevel: isTopLevel)
            s.byID[id] = Entry(inode: inode, lookups: 1)
            s.byKey[key] = id
            return (inode, false)
        }
        if duplicate { Sys.close(fd) }
        return inode
    }

    /// Counts one more lookup of a node already known (readdirplus of a cached entry, link).
    func addLookup(_ inode: Inode) {
        state.withLock { s in
            if var e = s.byID[inode.nodeID] {
                e.lookups += 1
                s.byID[inode.nodeID] = e
            }
        }
    }

    /// The kernel forgets `n` lookups; the inode and its descriptor go when none remain.
    func forget(_ id: UInt64, _ n: UInt64) {
        let dead: Inode? = state.withLock { s in
            guard var e = s.byID[id] else { return nil }
            if e.lookups > n {
                e.lookups -= n
                s.byID[id] = e
                return nil
            }
            s.byID[id] = nil
            let key = Key(view: e.inode.view, dev: e.inode.dev, ino: e.inode.ino)
            if s.byKey[key] == id { s.byKey[key] = nil }
            return e.inode
        }
        if let dead, dead.fd >= 0 { Sys.close(dead.fd) }
    }

    var count: Int { state.withLock { $0.byID.count } }

    /// Closes every descriptor (at unmount).
    func removeAll() {
        let all = state.withLock { s -> [Inode] in
            let v = s.byID.values.map(\.inode)
            s.byID.removeAll()
            s.byKey.removeAll()
            return v
        }
        for i in all where i.fd >= 0 { Sys.close(i.fd) }
    }
}
