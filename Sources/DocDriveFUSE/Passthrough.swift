// Passthrough: hands open files' reads and writes to the kernel (FUSE passthrough, Linux 6.9+).
import CFuseTransport
import DocDriveCore
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// With passthrough the kernel reads and writes an open file's backing file itself: data never
/// travels through /dev/fuse and the daemon, so sequential I/O runs at the backing disk's speed
/// and a written file costs no WRITE requests. Opening, closing, metadata and locks still come
/// to the drive; a save is noticed at close and fsync by the file's version (see the core's
/// `writesBypass`).
///
/// The kernel keeps one backing file per inode: while any file of an inode is open with
/// passthrough, every other open of it must use the same backing id, and while one is open the
/// ordinary way, none may use passthrough. So each node with open files is in one mode until
/// its last file is released, and its backing id is registered once for all its opens.
final class Passthrough: Sendable {
    /// Set at INIT: the daemon may register backing files (root) and the kernel agreed.
    private let enabled = Atomic<Bool>(false)
    /// The session's /dev/fuse descriptor, for the backing-file ioctls.
    private let deviceFD = Atomic<Int32>(-1)
    /// Whether to offer passthrough at all (the mount's `passthrough` setting and root).
    let wanted: Bool
    private let logger: Logger

    private struct NodeFiles {
        /// The backing id the node's open files share; 0 when they are open the ordinary way.
        var backingID: Int32
        var openCount: Int
    }
    /// Nodes with open files, in parts picked by node id (every open and release of every
    /// file came through one lock: 17 % of the daemon's contended lock waits with 8 parallel
    /// writers). A node's opens always meet in the same part. Lock: one part at a time, held
    /// across the registering ioctl, which allocates an id and takes a file reference, never
    /// waiting for I/O, and across the content path's `Inode.acquire` (the core's lock order, 7).
    private final class Shard: Sendable {
        let nodes = Mutex<[UInt64: NodeFiles]>([:])
    }
    private static let shardCount = 16
    private let shards: [Shard] = (0..<Passthrough.shardCount).map { _ in Shard() }
    @inline(__always)
    private func shard(_ node: UInt64) -> Shard { shards[Int(node % UInt64(Self.shardCount))] }
    /// The first refusal of the kernel, logged once.
    private let refusalLogged = Atomic<Bool>(false)

    init(wanted: Bool, logger: Logger) {
        self.wanted = wanted
        self.logger = logger
    }

    var isEnabled: Bool { enabled.load(ordering: .relaxed) }

    func setDevice(_ fd: Int32) { deviceFD.store(fd, ordering: .relaxed) }

    /// At INIT, on libfuse's thread, just before its reply: whether to offer passthrough (the
    /// kernel did, and it is wanted). The caller marks the reply (`opInit`).
    func negotiate() -> Bool {
        guard wanted, dd_fuse_kernel_offers_passthrough() != 0 else { return false }
        enabled.store(true, ordering: .relaxed)
        return true
    }

    /// Counts a newly opened file of `node` and returns the backing id its open reply must carry
    /// (0: open it the ordinary way). `throughDrive`: the node's files go through the drive
    /// while this one is open, unless some pass through already (the kernel then refuses any
    /// other kind of open of the node, EIO); then this one passes through too.
    func opened(_ file: OpenFile, in fs: DriveFileSystem, throughDrive: Bool = false) -> Int32 {
        guard isEnabled else { return 0 }
        let node = file.inode.nodeID
        let id: Int32 = shard(node).nodes.withLock { table in
            if throughDrive, table[node] == nil {
                table[node] = NodeFiles(backingID: 0, openCount: 1)
                return 0
            }
            if var n = table[node] {
                n.openCount += 1
                table[node] = n
                return n.backingID
            }
            let r = register(file, fs)
            table[node] = NodeFiles(backingID: max(r, 0), openCount: 1)
            if r < 0, !refusalLogged.exchange(true, ordering: .relaxed) {
                logger.notice("the kernel refused a passthrough file (\(String(cString: strerror(-r)))); such files are read and written through the drive")
            }
            return max(r, 0)
        }
        return id
    }

    /// Registers a backing file for `file`'s content: a backing id, or -errno.
    ///
    /// The kernel keeps the registered open file description until the id is closed, so it is
    /// an O_PATH descriptor of the same file, never the open file's own: a flock on that would
    /// outlive the close that must drop it, and its write access would keep exec away (ETXTBSY).
    private func register(_ file: OpenFile, _ fs: DriveFileSystem) -> Int32 {
        let device = deviceFD.load(ordering: .relaxed)
        return fs.withContentPath(file) { dd_fuse_backing_open(device, $0) } ?? -EBADF
    }

    /// The file counted by `opened` is released (or its open reply could not be sent).
    func released(_ file: OpenFile) {
        guard isEnabled else { return }
        let node = file.inode.nodeID
        let unused: Int32 = shard(node).nodes.withLock { table in
            guard var n = table[node] else { return 0 }
            n.openCount -= 1
            if n.openCount > 0 { table[node] = n; return 0 }
            table[node] = nil
            return n.backingID
        }
        // The kernel let go of the backing file when it released the node's last file.
        if unused > 0 { _ = dd_fuse_backing_close(deviceFD.load(ordering: .relaxed), unused) }
    }
}
