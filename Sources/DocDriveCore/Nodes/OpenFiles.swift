// OpenFiles: the files open through the mount, by backing file, for the sync engine's questions.
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The files open through the mount, by backing file (dev, ino): what the sync engine asks
/// (is it open, open for writing, written since its last fsync) is one dictionary lookup, not a
/// scan of every node the kernel knows (with 100,000 nodes, two scans per upload made a fresh
/// mount's first listing 3.6 times slower). One per drive (`Drive` makes it, the file system
/// counts opens in it, the sync engine asks it as its `LocalFiles`).
/// In parts by backing file, each with its own lock: every open and every close of every file
/// came through one lock (with the node table's ids and the passthrough table sharded, it had
/// the most contended waits left with 8 parallel writers after the node table's one global lock,
/// since sharded too).
/// Lock: leaf, one part at a time (an inode's `fsyncedVersion` is read after it is dropped).
public final class OpenFiles: Sendable {
    public init() {}

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
    public func isOpen(dev: UInt64, ino: UInt64) -> Bool {
        shard(dev: dev, ino: ino).state.withLock { $0[FileKey(dev: dev, ino: ino)] != nil }
    }

    /// Whether a process has the backing file (dev, ino) open for writing through the mount.
    public func isOpenForWriting(dev: UInt64, ino: UInt64) -> Bool {
        shard(dev: dev, ino: ino).state.withLock { $0[FileKey(dev: dev, ino: ino)]?.writers.isEmpty == false }
    }

    /// Runs `body` (which renames over or unlinks the backing file) only if no process has the
    /// file open for writing through the mount, under the part's lock, so that no open counts
    /// itself in between: an open after it finds the file unlinked. The body is one system call
    /// on the backing folder and takes no lock of the drive's.
    public func unlessOpenForWriting(dev: UInt64, ino: UInt64, _ body: () -> Void) -> Bool {
        shard(dev: dev, ino: ino).state.withLock { s in
            guard s[FileKey(dev: dev, ino: ino)]?.writers.isEmpty != false else { return false }
            body()
            return true
        }
    }

    /// Open for writing through the mount and changed since its last fsync (`st`: as it is now).
    public func hasUnsyncedWrites(_ st: stat) -> Bool {
        let dev = UInt64(st.st_dev), ino = UInt64(st.st_ino)
        let writers = shard(dev: dev, ino: ino).state.withLock { $0[FileKey(dev: dev, ino: ino)]?.writers ?? [] }
        guard !writers.isEmpty else { return false }
        let version = FileVersion(st)
        return writers.contains { $0.fsyncedVersion.withLock { $0 } != version }
    }
}
