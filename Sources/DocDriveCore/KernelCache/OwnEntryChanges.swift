// OwnEntryChanges: the removals and renames the drive makes through the mount in watched backing
// folders, so that the kernel-cache watch does not tell the kernel again what it already knows.
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// An unlink, rmdir or rename through the mount in a watched folder of the unified view: the
/// kernel itself drops or moves the entry and invalidates the folders' attributes when the
/// request succeeds (FUSE's unlink, rmdir and rename do). The watch (KernelCacheWatch) still
/// reports the change (IN_DELETE, IN_MOVED_FROM/TO), and telling the kernel once more cost a
/// write to /dev/fuse per name, each waiting for the folder's lock, which the next unlink of an
/// `rm -rf` in that folder holds.
///
/// So such a change is *expected* before its system call (its event is then always read after
/// it), withdrawn if the call fails, and the watch consumes the expectation instead of
/// invalidating. A failed call whose expectation the watch consumed first (another program
/// changed the same name in that instant) has the entry invalidated by the caller instead. An
/// expectation the watch never consumes (its event lost with an overflowed queue, which drops
/// every expectation, or the folder's watch removed meanwhile) is void after `lifetime`.
///
/// Keys are 64-bit hashes of the folder's identity and the name; lock: each shard's is a leaf.
final class OwnEntryChanges: Sendable {
    private struct Pending {
        var count: Int32
        var at: Int64
    }

    private final class Shard: Sendable {
        let pending = Mutex<[UInt64: Pending]>([:])
    }

    private static let shardCount = 16
    private let shards: [Shard] = (0..<OwnEntryChanges.shardCount).map { _ in Shard() }
    /// Nanoseconds an expectation waits for its event.
    static let lifetime: Int64 = 5_000_000_000
    private let lastPrune = Atomic<Int64>(0)

    @inline(__always)
    private func shard(_ key: UInt64) -> Shard { shards[Int(key % UInt64(Self.shardCount))] }

    /// FNV-1a of the folder's device and inode and the name's bytes.
    static func key(dev: UInt64, ino: UInt64, name: UnsafeBufferPointer<CChar>) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        @inline(__always) func mix(_ b: UInt8) { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        for i in 0..<8 { mix(UInt8(truncatingIfNeeded: dev >> (8 * UInt64(i)))) }
        for i in 0..<8 { mix(UInt8(truncatingIfNeeded: ino >> (8 * UInt64(i)))) }
        for c in name { mix(UInt8(bitPattern: c)) }
        return h
    }

    static func key(dev: UInt64, ino: UInt64, name: UnsafePointer<CChar>) -> UInt64 {
        key(dev: dev, ino: ino, name: UnsafeBufferPointer(start: name, count: strlen(name)))
    }

    /// One more event of `key` is to come from the drive's own change.
    func expect(_ key: UInt64) {
        let t = Sys.monotonicNanoseconds()
        shard(key).pending.withLock { m in
            m[key, default: Pending(count: 0, at: t)].count += 1
            m[key]!.at = t
        }
    }

    /// The change was not made: false when the watch consumed the expectation already (with
    /// another program's change of that name, which the caller must then tell the kernel of).
    func withdraw(_ key: UInt64) -> Bool {
        shard(key).pending.withLock { m in
            guard var p = m[key] else { return false }
            p.count -= 1
            m[key] = p.count > 0 ? p : nil
            return true
        }
    }

    /// On the watch's thread: true when the event of `key` was expected (and consumes it).
    func take(_ key: UInt64, now: Int64) -> Bool {
        shard(key).pending.withLock { m in
            guard var p = m[key] else { return false }
            let fresh = now - p.at < Self.lifetime
            p.count -= 1
            m[key] = p.count > 0 && fresh ? p : nil
            return fresh
        }
    }

    /// Drops the expectations older than `lifetime` (at most once per lifetime), or all of them.
    func prune(now: Int64, all: Bool = false) {
        if !all {
            let last = lastPrune.load(ordering: .relaxed)
            guard now - last >= Self.lifetime else { return }
        }
        lastPrune.store(now, ordering: .relaxed)
        for s in shards {
            s.pending.withLock { m in
                guard !m.isEmpty else { return }
                if all { m.removeAll() } else { m = m.filter { now - $0.value.at < Self.lifetime } }
            }
        }
    }
}
