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

    /// Files filled, by inode. Lock: leaf.
    private let files = Mutex<[UInt64: Times]>([:])
    /// Whether `files` has anything (attributes of every node are given through `apply`).
    private let any = Atomic<Bool>(false)
    /// More entries than this are dropped all at once (a file shows its real ctime then).
    static let most = 100_000

    public init() {}

    static func ns(_ t: timespec) -> Int64 { Int64(t.tv_sec) * 1_000_000_000 + Int64(t.tv_nsec) }

    /// The placeholder `ino`, with ctime `before`, is being filled now.
    func filling(ino: UInt64, before: timespec) {
        files.withLock { f in
            if f.count >= Self.most { f.removeAll() }
            f[ino] = Times(real: nil, shown: Self.ns(before))
        }
        any.store(true, ordering: .relaxed)
    }

    /// The file `ino` was filled (nil: the fill failed, it shows its real ctime): it has the
    /// ctime `after` now.
    func filled(ino: UInt64, after: timespec?) {
        files.withLock { f in
            guard let after else {
                f.removeValue(forKey: ino)
                return
            }
            f[ino]?.real = Self.ns(after)
        }
    }

    /// Gives `st` (a backing file's attributes, for the kernel) the ctime its placeholder had,
    /// when it is a file filled since and unchanged since; forgets a file that changed.
    public func apply(_ st: inout stat) {
        guard any.load(ordering: .relaxed), st.st_mode & S_IFMT == S_IFREG else { return }
        let ino = UInt64(st.st_ino), real = Self.ns(st.st_ctim)
        let shown = files.withLock { f -> Int64? in
            guard let t = f[ino] else { return nil }
            if t.real == nil || t.real == real { return t.shown }
            f.removeValue(forKey: ino)
            return nil
        }
        if let shown { st.st_ctim = timespec(tv_sec: Int(shown / 1_000_000_000), tv_nsec: Int(shown % 1_000_000_000)) }
    }
}
