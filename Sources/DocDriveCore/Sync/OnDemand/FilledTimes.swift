// FilledTimes: a placeholder filled through the mount keeps showing the change time (ctime) it
// had as a placeholder, until the file changes again.
//
// Filling writes the backing file and removes its mark, which moves its ctime, though nothing
// the user sees changed (same content as listed, same size, same mtime, same inode). A program
// that stats a file, opens it and stats it again to make sure it read one version (GNU tar:
// "file changed as we read it", exit status 1; backup tools) would see the first open of every
// placeholder as a change. So the attributes given to the kernel show the placeholder's ctime
// while the backing file's ctime is still the one the fill left. In memory only: after a
// restart the real ctime shows, which says no more than "changed at some time".
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

public final class FilledTimes: Sendable {
    private struct Times {
        /// The backing file's ctime when the fill ended, in nanoseconds; nil while it is being
        /// filled (a stat then, by readahead's fill, must show what the stat after it shows).
        var real: Int64?
        /// The placeholder's ctime, shown instead.
        var shown: Int64
    }

    /// One part of the table: the files whose inode number falls in it. `apply` runs on every
    /// getattr, setattr and lookup reply of the mount; with one lock for all, every request of
    /// every thread met there once any placeholder had been filled. With the table in parts,
    /// each with its own count, a request takes no lock at all when its part is empty and
    /// otherwise one that few others want.
    private final class Shard: Sendable {
        /// Files filled, by inode. Lock: leaf.
        let files = Mutex<[UInt64: Times]>([:])
        /// How many files `files` has; written under its lock, read without it.
        let count = Atomic<Int>(0)

        /// Changes the files under the lock, and their count with them.
        func update<T>(_ body: (inout [UInt64: Times]) -> T) -> T {
            files.withLock { f in
                let before = f.count
                let r = body(&f)
                if f.count != before { count.store(f.count, ordering: .releasing) }
                return r
            }
        }
    }

    private static let shardCount = 64
    private let shards: [Shard] = (0..<FilledTimes.shardCount).map { _ in Shard() }
    /// More entries than this are dropped all at once (a file shows its real ctime then).
    static let most = 100_000
    private static let mostPerShard = most / shardCount

    public init() {}

    @inline(__always)
    private func shard(_ ino: UInt64) -> Shard { shards[Int(ino % UInt64(Self.shardCount))] }

    static func ns(_ t: timespec) -> Int64 { Timestamp.nanoseconds(t) }

    /// How many files show their placeholder's ctime now (for tests).
    public var count: Int { shards.reduce(0) { $0 + $1.count.load(ordering: .acquiring) } }

    /// The placeholder `ino`, with ctime `before`, is being filled now.
    public func filling(ino: UInt64, before: timespec) {
        shard(ino).update { f in
            if f.count >= Self.mostPerShard { f.removeAll() }
            f[ino] = Times(real: nil, shown: Self.ns(before))
        }
    }

    /// The file `ino` was filled (nil: the fill failed, it shows its real ctime): it has the
    /// ctime `after` now.
    public func filled(ino: UInt64, after: timespec?) {
        shard(ino).update { f in
            guard let after else {
                f.removeValue(forKey: ino)
                return
            }
            f[ino]?.real = Self.ns(after)
        }
    }

    /// The file `ino`, filled and unchanged since (its ctime still `real`), is about to change
    /// its ctime for the drive's own reason (its "filled" mark going, FillCommits.swift): it
    /// keeps showing its placeholder's ctime meanwhile, and `filled` gives it the new one.
    /// False, with nothing done, when it shows its real ctime already.
    public func hold(ino: UInt64, real: timespec) -> Bool {
        shard(ino).update { f in
            guard f[ino]?.real == Self.ns(real) else { return false }
            f[ino]!.real = nil
            return true
        }
    }

    /// Gives `st` (a backing file's attributes, for the kernel) the ctime its placeholder had,
    /// when it is a file filled since and unchanged since; forgets a file that changed.
    public func apply(_ st: inout stat) {
        guard st.st_mode & S_IFMT == S_IFREG else { return }
        let ino = UInt64(st.st_ino), s = shard(ino)
        guard s.count.load(ordering: .acquiring) > 0 else { return }
        let real = Self.ns(st.st_ctim)
        let shown = s.update { f -> Int64? in
            guard let t = f[ino] else { return nil }
            if t.real == nil || t.real == real { return t.shown }
            f.removeValue(forKey: ino)
            return nil
        }
        if let shown { st.st_ctim = Timestamp.timespec(shown) }
    }
}
