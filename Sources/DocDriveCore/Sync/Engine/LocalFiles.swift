// LocalFiles: what the sync engine asks about a store's local files that only the mount knows
// (which are open through it), given at construction. The mount's `OpenFiles` answers it.
#if canImport(Glibc)
import Glibc
#endif

/// The files of the local copies open through the mount, by backing file (dev, ino).
public protocol LocalFiles: Sendable {
    /// Whether a process has the backing file open through the mount at all.
    func isOpen(dev: UInt64, ino: UInt64) -> Bool
    /// Whether a process has the backing file open for writing through the mount.
    func isOpenForWriting(dev: UInt64, ino: UInt64) -> Bool
    /// Runs `body` (a rename over, or an unlink of, the backing file) only if no process has the
    /// file open for writing through the mount, checked and done under the lock an open takes to
    /// count itself: false, without running it, if one has.
    func unlessOpenForWriting(dev: UInt64, ino: UInt64, _ body: () -> Void) -> Bool
    /// Whether a process has the backing file open for writing through the mount and wrote it
    /// since its last fsync (`st`: the file as the upload sees it): such a file may be half
    /// written. A file fsynced at this version is a version its writer chose to keep.
    func hasUnsyncedWrites(_ st: stat) -> Bool
}

extension OpenFiles: LocalFiles {}

/// The moments of the sync engine where a test acts as another device would, or stops this one.
/// Only tests build one; a drive has none, and the engine then does nothing at these moments.
public struct SyncProbe: Sendable {
    /// A worker is about to decide the store path (as text), its lock held.
    public var willDecide: @Sendable (String) -> Void = { _ in }
    /// An upload of the store path (as text) is on the remote and its base not written yet
    /// (a test stops the device here by throwing).
    public var uploaded: @Sendable (String) throws(DriveError) -> Void = { _ in }
    /// A worker is about to make the store paths (as text) it uploaded durable on the remote,
    /// then record them (`StoreSync.commit`).
    public var willCommitUploads: @Sendable ([String]) -> Void = { _ in }
    /// The uploader took noted paths for a commit and is about to write them into the queue.
    public var willQueueNoted: @Sendable () -> Void = {}
    public init() {}
}
