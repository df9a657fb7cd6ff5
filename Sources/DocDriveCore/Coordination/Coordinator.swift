// Coordinator: the drive's NSFileCoordinator. Everything the drive itself does to a document's
// content (uploads, the document modes' copies and moves) runs inside a coordinated intent.
import CDocDriveSys
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Reading and writing intents on one or several files at once.
///
/// * Between the drive's own actors (upload workers, `docdrive move/export/import`), each file
///   has a readers/writer state: readers share, a writer is alone.
/// * Against processes, the same intent is held on the backing file as a flock and an OFD lock
///   (shared for reading, exclusive for writing). Processes using the mount hold their advisory
///   locks on the backing file too (FileSystem+Locks), so a writer's lock keeps a coordinated
///   reader out, and a coordinated writer waits for every reader's and writer's lock.
/// * Several files are taken in one global order (device, inode), so two actors that want the
///   same files never deadlock; an intent that cannot be had within its time gives up whole.
/// * Options, as in the seeds: `forUploading` (a reader that needs one consistent version: it
///   waits for writers and keeps new ones out while it reads), `metadataOnly` (never waits).
///
/// Lock: `held` protects the readers/writer table; a leaf lock, never held across a system call.
public final class Coordinator: Sendable {
    public enum Access: Sendable { case reading, writing }

    public struct Options: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        public static let forUploading = Options(rawValue: 1)
        public static let metadataOnly = Options(rawValue: 2)
    }

    /// One file and what is wanted of it. `fd` must be open for reading (reading) or for
    /// writing (writing): the locks on the backing file are taken through it.
    public struct Intent: Sendable {
        public var fd: Int32
        public var access: Access
        public init(fd: Int32, _ access: Access) {
            self.fd = fd
            self.access = access
        }
    }

    struct Key: Hashable, Comparable {
        var dev: UInt64
        var ino: UInt64
        static func < (a: Key, b: Key) -> Bool { (a.dev, a.ino) < (b.dev, b.ino) }
    }

    /// Readers (> 0) or one writer (-1) per file, among the drive's own actors.
    private let held = Mutex<[Key: Int]>([:])

    public init() {}

    /// Runs `body` while every intent is held. Throws `busy` (naming nothing: the caller knows
    /// the file) if they cannot all be had within `timeout` seconds; nothing stays held.
    public func coordinate<T>(_ intents: [Intent], options: Options = [], timeout: Double,
                              _ body: () throws -> T) throws -> T {
        if options.contains(.metadataOnly) { return try body() }
        var wanted = [Key: Intent]()
        for i in intents {
            var st = stat()
            guard fstat(i.fd, &st) == 0 else { throw DriveError.io("Cannot coordinate access", .init(rawValue: errno)) }
            let k = Key(dev: UInt64(st.st_dev), ino: UInt64(st.st_ino))
            if let old = wanted[k], old.access == .writing { continue }
            wanted[k] = i
        }
        let ordered = wanted.sorted { $0.key < $1.key }
        let deadline = Date().addingTimeInterval(timeout)
        var taken = [(Key, Intent)]()
        defer { for (k, i) in taken.reversed() { release(k, i) } }
        for (k, i) in ordered {
            guard acquire(k, i, until: deadline) else {
                throw DriveError(.busy, "The file is in use: another program holds a lock on it.")
            }
            taken.append((k, i))
        }
        return try body()
    }

    private func acquire(_ k: Key, _ i: Intent, until deadline: Date) -> Bool {
        var delay: UInt32 = 2_000
        while true {
            if tryAcquire(k, i) { return true }
            if Date() >= deadline { return false }
            usleep(delay)
            delay = min(delay * 2, 100_000)
        }
    }

    /// Both levels at once, or neither (so a waiting actor holds nothing that others need).
    private func tryAcquire(_ k: Key, _ i: Intent) -> Bool {
        let writing = i.access == .writing
        let ours: Bool = held.withLock { h in
            let n = h[k] ?? 0
            if writing ? n != 0 : n < 0 { return false }
            h[k] = writing ? -1 : n + 1
            return true
        }
        guard ours else { return false }
        if dd_flock(i.fd, (writing ? dd_LOCK_EX : dd_LOCK_SH) | dd_LOCK_NB) == 0 {
            if dd_ofd_setlk(i.fd, writing ? dd_F_WRLCK : dd_F_RDLCK, 0, 0) == 0 { return true }
            _ = dd_flock(i.fd, dd_LOCK_UN)
        }
        unmark(k, writing)
        return false
    }

    private func release(_ k: Key, _ i: Intent) {
        _ = dd_ofd_setlk(i.fd, dd_F_UNLCK, 0, 0)
        _ = dd_flock(i.fd, dd_LOCK_UN)
        unmark(k, i.access == .writing)
    }

    private func unmark(_ k: Key, _ writing: Bool) {
        held.withLock { h in
            let n = h[k] ?? 0
            let next = writing ? 0 : max(0, n - 1)
            h[k] = next == 0 ? nil : next
        }
    }
}
