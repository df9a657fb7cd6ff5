// LockTable: the advisory locks processes hold through the mount, and their twins on the backing files.
import CDocDriveSys
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// A byte-range lock as fcntl sees it: `length` 0 reaches to the end of the file, however far
/// it grows. `type` is F_RDLCK, F_WRLCK or F_UNLCK.
public struct RecordLock: Sendable, Equatable {
    public var type: Int16
    public var start: Int64
    public var length: Int64
    /// The process that holds it (0 when unknown, -1 for an OFD lock of another program).
    public var pid: Int32

    public init(type: Int16, start: Int64, length: Int64, pid: Int32) {
        self.type = type
        self.start = start
        self.length = length
        self.pid = pid
    }

    /// Last byte covered (Int64.max: to the end of the file).
    var end: Int64 { length == 0 ? .max : start &+ length &- 1 }
    var isWrite: Bool { type == dd_F_WRLCK }

    func overlaps(_ o: RecordLock) -> Bool { start <= o.end && o.start <= end }
    func conflicts(with o: RecordLock) -> Bool { overlaps(o) && (isWrite || o.isWrite) }

    static func range(_ type: Int16, from start: Int64, through end: Int64, pid: Int32) -> RecordLock {
        RecordLock(type: type, start: start, length: end == .max ? 0 : end - start + 1, pid: pid)
    }
}

/// The advisory locks taken through the mount, so the drive knows who holds what.
///
/// POSIX and OFD record locks are kept per (backing file, lock owner): each owner has its own
/// descriptor on the backing file and the same lock is taken on it as an OFD lock. So locks
/// conflict between owners exactly as the kernel decides for the backing file, and programs
/// that use the backing folder directly see them (and are seen). flock locks live on each open
/// file's own backing descriptor (`OpenFile.fd`); the table only records their holders.
public final class LockTable: Sendable {
    /// A backing file (the same file seen in two views is one key).
    struct FileKey: Hashable {
        let dev: UInt64
        let ino: UInt64
    }

    struct OwnerKey: Hashable {
        let file: FileKey
        let owner: UInt64
    }

    /// One owner's record locks on one file.
    struct Held {
        /// The owner's descriptor on the backing file, where its OFD locks are.
        let fd: Int32
        /// Granted ranges, never overlapping each other (POSIX splits and replaces on overlap).
        var ranges: [RecordLock] = []
        /// The open file the owner's last request came through: an OFD lock's owner is that
        /// open file, and the kernel sends no unlock when it closes (only its release).
        var via: ObjectIdentifier?
        /// That open file was opened without FLUSH (`OpenFile.noFlush`): the kernel says
        /// nothing when the owner closes it while another process still has it.
        var viaNoFlush = false
    }

    /// A flock holder: one open file.
    struct FlockHolder {
        var exclusive: Bool
        var pid: Int32
    }

    struct State {
        var records: [OwnerKey: Held] = [:]
        var flocks: [FileKey: [ObjectIdentifier: FlockHolder]] = [:]
    }

    /// The table in parts, by backing file: every question and change is about one file, so
    /// it takes that file's part only. (With one lock, every flush and release of every file
    /// met there, and a release scanned every owner's record of every file under it.) Each
    /// part's lock protects its records and the owners' backing descriptors. Held across the
    /// non-blocking F_OFD_SETLK/F_OFD_GETLK on those descriptors (never a waiting call), so that
    /// the backing file's locks and the table change together and no descriptor closes while
    /// in use. A leaf: no two parts are ever held at once.
    private final class Shard: Sendable {
        let state = Mutex(State())
    }
    private static let shardCount = 16
    private let shards: [Shard] = (0..<LockTable.shardCount).map { _ in Shard() }
    @inline(__always)
    private func shard(_ f: FileKey) -> Shard { shards[Int((f.ino ^ (f.dev &* 0x9E37_79B9)) % UInt64(Self.shardCount))] }

    init() {}

    enum Attempt {
        case granted
        /// Someone else holds a conflicting lock.
        case busy
        case failed(Errno)
        /// The owner has no backing descriptor yet: open one and try again.
        case needDescriptor
    }

    /// Tries once to take (or change to) `lock` for `owner`, on its backing descriptor; `spare`
    /// is a fresh descriptor to use if the owner has none (taken: set to -1).
    func tryLock(_ key: OwnerKey, _ lock: RecordLock, via: ObjectIdentifier?, viaNoFlush: Bool = false,
                 spare: inout Int32) -> Attempt {
        let fresh = spare
        let (result, used): (Attempt, Bool) = shard(key.file).state.withLock { s in
            var used = false
            if s.records[key] == nil {
                guard fresh >= 0 else { return (.needDescriptor, false) }
                s.records[key] = Held(fd: fresh)
                used = true
            }
            var h = s.records[key]!
            if dd_ofd_setlk(h.fd, lock.type, lock.start, lock.length) != 0 {
                let e = dd_errno()
                if h.ranges.isEmpty {
                    s.records[key] = nil
                    Sys.close(h.fd)
                }
                return (e == EAGAIN || e == EACCES ? .busy : .failed(Errno(rawValue: e)), used)
            }
            h.ranges = Self.applying(lock, to: h.ranges)
            h.via = via
            h.viaNoFlush = viaNoFlush
            s.records[key] = h
            return (.granted, used)
        }
        if used { spare = -1 }
        return result
    }

    /// Releases `range` (an F_UNLCK lock) of `owner`; closes its descriptor when nothing is left.
    func unlock(_ key: OwnerKey, _ range: RecordLock) throws(Errno) {
        let e: Int32 = shard(key.file).state.withLock { s in
            guard var h = s.records[key] else { return 0 }
            if dd_ofd_setlk(h.fd, dd_F_UNLCK, range.start, range.length) != 0 { return dd_errno() }
            h.ranges = Self.applying(range, to: h.ranges)
            if h.ranges.isEmpty {
                s.records[key] = nil
                Sys.close(h.fd)
            } else {
                s.records[key] = h
            }
            return 0
        }
        if e != 0 { throw Errno(rawValue: e) }
    }

    /// Drops every record lock of `owner` on the file (a close by that owner).
    func dropOwner(_ key: OwnerKey) {
        let fd: Int32 = shard(key.file).state.withLock { s in s.records.removeValue(forKey: key)?.fd ?? -1 }
        if fd >= 0 { Sys.close(fd) }  // closing the descriptor drops its OFD locks
    }

    /// Drops what an open file held when it goes away: its OFD locks (owned by the open file)
    /// and its flock. A process's POSIX locks were already dropped by the flush of its close;
    /// those last taken through a file without flushes (`OpenFile.noFlush`) go here.
    func dropOpenFile(_ file: FileKey, _ id: ObjectIdentifier) {
        let fds: [Int32] = shard(file).state.withLock { s in
            var fds = [Int32]()
            for (k, h) in s.records where k.file == file && h.via == id {
                s.records[k] = nil
                fds.append(h.fd)
            }
            s.flocks[file]?[id] = nil
            if s.flocks[file]?.isEmpty == true { s.flocks[file] = nil }
            return fds
        }
        fds.forEach(Sys.close)
    }

    /// The lock of another owner that keeps `owner` from taking `lock`, as the drive knows it;
    /// `ownDescriptor` is the owner's backing descriptor, if it has one. Runs `body` under the
    /// table's lock with both, so a backing query sees the same state.
    func conflict<T>(_ key: OwnerKey, _ lock: RecordLock, _ body: (RecordLock?, Int32) -> T) -> T {
        shard(key.file).state.withLock { s in
            var found: RecordLock?
            for (k, h) in s.records where k.file == key.file && k.owner != key.owner {
                if let c = h.ranges.first(where: { $0.conflicts(with: lock) }) {
                    found = c
                    break
                }
            }
            return body(found, s.records[key]?.fd ?? -1)
        }
    }

    /// The other owners whose locks conflict with `lock` and whose last lock request came
    /// through a file opened without FLUSH, with the processes that took those locks.
    func conflictsThroughNoFlushFiles(_ key: OwnerKey, _ lock: RecordLock) -> [(OwnerKey, Set<Int32>)] {
        shard(key.file).state.withLock { s in
            s.records.compactMap { k, h in
                guard k.file == key.file, k.owner != key.owner, h.viaNoFlush,
                      h.ranges.contains(where: { $0.conflicts(with: lock) }) else { return nil }
                return (k, Set(h.ranges.map(\.pid)))
            }
        }
    }

    func recordFlock(_ file: FileKey, _ id: ObjectIdentifier, exclusive: Bool?, pid: Int32) {
        shard(file).state.withLock { s in
            if let exclusive {
                s.flocks[file, default: [:]][id] = FlockHolder(exclusive: exclusive, pid: pid)
            } else {
                s.flocks[file]?[id] = nil
                if s.flocks[file]?.isEmpty == true { s.flocks[file] = nil }
            }
        }
    }

    /// Whether a process holds a write lock (F_WRLCK or flock LOCK_EX) through the mount on
    /// the backing file `dev`/`ino`.
    public func isWriteLocked(dev: UInt64, ino: UInt64) -> Bool {
        let f = FileKey(dev: dev, ino: ino)
        return shard(f).state.withLock { s in
            if s.flocks[f]?.values.contains(where: { $0.exclusive }) == true { return true }
            return s.records.contains { $0.key.file == f && $0.value.ranges.contains { $0.isWrite } }
        }
    }

    /// How many owners hold record locks and how many open files hold flocks (for tests and logs).
    public var counts: (records: Int, flocks: Int) {
        shards.reduce((0, 0)) { n, sh in
            sh.state.withLock { s in (n.0 + s.records.count, n.1 + s.flocks.values.reduce(0) { $0 + $1.count }) }
        }
    }

    /// POSIX semantics of one request on an owner's ranges: the new range replaces whatever part
    /// of the old ones it covers (an F_UNLCK range just removes). Adjacent ranges stay separate.
    static func applying(_ lock: RecordLock, to ranges: [RecordLock]) -> [RecordLock] {
        var out = [RecordLock]()
        for r in ranges {
            guard r.overlaps(lock) else { out.append(r); continue }
            if r.start < lock.start { out.append(.range(r.type, from: r.start, through: lock.start - 1, pid: r.pid)) }
            if lock.end < r.end { out.append(.range(r.type, from: lock.end + 1, through: r.end, pid: r.pid)) }
        }
        if lock.type != dd_F_UNLCK { out.append(lock) }
        return out.sorted { $0.start < $1.start }
    }
}
