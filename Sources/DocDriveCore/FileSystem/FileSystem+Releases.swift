// FileSystem+Releases: files closed without a FLUSH, and waiting for the releases the kernel has queued.
import Synchronization

/// Waits until the daemon has handled every RELEASE the kernel queued before the call (the
/// adapter's, which knows the kernel's queue). False when it could not tell (it timed out, or
/// the mount is gone); the caller then goes on as before.
public struct ReleaseBarrier: Sendable {
    public let wait: @Sendable () -> Bool
    public init(wait: @escaping @Sendable () -> Bool) { self.wait = wait }
}

/// A file opened without FLUSH (`OpenFile.noFlush`) is closed, for the daemon, at its RELEASE,
/// which the kernel queues in the background as the last close returns. What could see the
/// moment between them waits for the queued releases first:
/// * `docdrive sync` (the sync-poll command), so a file closed before it is among the saves;
/// * a lock request that finds a conflict while some such file holds locks taken through it,
///   so a lock its holder's close dropped is not reported held;
/// * `user.docdrive.status` of a file open for writing, so a file just closed says "pending".
extension DriveFileSystem {
    /// Set by the adapter once it can wait for queued releases; then it may open created files
    /// without FLUSH (`create(noFlush:)`).
    public func setReleaseBarrier(_ b: ReleaseBarrier?) {
        releaseBarrier.withLock { $0 = b }
    }

    /// Returns once every release the kernel queued before the call has been handled (at once
    /// when no barrier is set). False when the adapter could not tell.
    @discardableResult
    public func awaitQueuedReleases() -> Bool {
        guard let b = releaseBarrier.withLock({ $0 }) else { return true }
        return b.wait()
    }

    /// Before a node's upload status is told: a file closed a moment ago may still have its
    /// release queued (only a file open for writing can).
    func awaitReleases(of n: Inode) {
        guard releaseBarrier.withLock({ $0 != nil }), openFiles.isOpenForWriting(dev: n.dev, ino: n.ino) else { return }
        awaitQueuedReleases()
    }

    /// A POSIX lock was taken through `file`: while a `noFlush` file holds some, a conflict may
    /// be one its queued release is about to end (its release drops them: `releaseLocks`).
    func tookLock(through file: OpenFile) {
        guard file.noFlush, !file.tookLocks.exchange(true, ordering: .relaxed) else { return }
        noFlushLockHolders.add(1, ordering: .relaxed)
    }

    /// The release of a `noFlush` file (its locks went with `releaseLocks`).
    func releasedWithoutFlush(_ file: OpenFile) {
        if file.tookLocks.load(ordering: .relaxed) { noFlushLockHolders.subtract(1, ordering: .relaxed) }
    }

    /// A lock request met a conflict: may a queued release be about to end it?
    var releasesMayDropLocks: Bool { noFlushLockHolders.load(ordering: .relaxed) > 0 }
}
