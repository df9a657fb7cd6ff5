// QueuedReleases: waits until the daemon has handled the RELEASEs the kernel queued before now.
import CFuseTransport
import CFuse
import Dispatch
import DocDriveCore
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The barrier behind `DriveFileSystem.awaitQueuedReleases` (see docdrive_requests.h): the
/// waiting thread opens and closes the mount's root folder itself. The kernel queues that
/// folder's RELEASEDIR behind every RELEASE queued before it and hands them to the daemon in
/// that order; its handler waits for the workers still handling an earlier RELEASE, then wakes
/// the waiting thread.
///
/// Lock: `state` is a leaf; `serial` (one barrier at a time) is held across the open, the
/// close and the wait, and nothing but `state` is taken under it.
final class QueuedReleases: Sendable {
    private let mountpoint: String
    private let logger: Logger
    /// Set while the session serves requests through our I/O functions (which record what
    /// each worker holds): a barrier needs both.
    let available = Atomic<Bool>(false)
    private let serial = Mutex<Void>(())
    private let active = Atomic<Bool>(false)
    private let state = Mutex<Barrier?>(nil)

    private struct Barrier {
        /// The thread that opens the root folder (the kernel sends its id, or the process's).
        let opener: Int32
        let done: DispatchSemaphore
        /// The handle of the opener's root folder, once its OPENDIR came.
        var handle: UInt64?
        /// `dd_fuse_await_earlier_releases`'s answer.
        var outcome: Int32 = -1
    }

    init(mountpoint: String, logger: Logger) {
        self.mountpoint = mountpoint
        self.logger = logger
    }

    /// Returns once every RELEASE the kernel queued before the call has been handled: true, or
    /// false when that cannot be known (the session is not serving, the mount is not reached
    /// through its path, or `timeout` seconds passed). Never call it from an OPENDIR or
    /// RELEASEDIR handler.
    func wait(timeout: Double = 5) -> Bool {
        guard available.load(ordering: .relaxed) else { return false }
        return serial.withLock { _ -> Bool in
            let done = DispatchSemaphore(value: 0)
            state.withLock { $0 = Barrier(opener: dd_gettid(), done: done) }
            active.store(true, ordering: .sequentiallyConsistent)
            defer {
                active.store(false, ordering: .sequentiallyConsistent)
                state.withLock { $0 = nil }
            }
            let fd = open(mountpoint, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard fd >= 0 else { return false }
            // The path led elsewhere (a lazy unmount), or the kernel sent no OPENDIR.
            let claimed = state.withLock { $0?.handle != nil }
            close(fd)
            guard claimed else { return false }
            guard done.wait(timeout: .now() + timeout) == .success else {
                logger.warning("the releases queued by the kernel were not all handled within \(timeout) s; going on without them")
                return false
            }
            let outcome = state.withLock { $0?.outcome ?? -1 }
            if outcome == -2, available.exchange(false, ordering: .relaxed) {
                // Created files are flushed at their closes again, as other files are.
                logger.warning("cannot tell which releases are being handled (too many request threads, or /proc/self/task unreadable): created files get a FLUSH at close from now on")
            }
            return outcome == 0
        }
    }

    /// An OPENDIR was answered with `handle`: the barrier's own, if it is the root folder
    /// opened by the waiting thread.
    func opened(_ ino: fuse_ino_t, by pid: pid_t, handle: UInt64) {
        guard ino == 1, active.load(ordering: .sequentiallyConsistent) else { return }
        state.withLock { b in
            guard b != nil, b!.handle == nil, pid == b!.opener || pid == getpid() else { return }
            b!.handle = handle
        }
    }

    /// A RELEASEDIR of `handle`: for the barrier's own, waits for the workers still handling
    /// an earlier RELEASE, then wakes the waiting thread.
    func released(handle: UInt64) {
        guard active.load(ordering: .sequentiallyConsistent), state.withLock({ $0?.handle == handle }) else { return }
        let outcome = dd_fuse_await_earlier_releases(3_000)
        state.withLock { b in
            guard b?.handle == handle else { return }
            b!.outcome = outcome
            b!.done.signal()
        }
    }
}

/// The files opened without FLUSH (created ones) that the kernel has not released yet, by
/// handle. A RELEASE still queued in the kernel when the connection ends (an unmount in the
/// instant after the last close) is dropped with it: once the session has ended, the files
/// left here are released by the daemon itself, so their saves are noted and uploaded in the
/// unmount's grace time rather than at the next mount.
///
/// Lock: each shard is a leaf.
final class UnreleasedFiles: Sendable {
    private final class Shard: Sendable {
        let handles = Mutex<Set<UInt64>>([])
    }
    private let shards = (0..<16).map { _ in Shard() }

    @inline(__always)
    private func shard(_ handle: UInt64) -> Shard { shards[Int((handle >> 4) & 15)] }

    /// Before the open reply is sent (its RELEASE may come at once after it).
    func add(_ handle: UInt64) {
        _ = shard(handle).handles.withLock { $0.insert(handle) }
    }

    func remove(_ handle: UInt64) {
        _ = shard(handle).handles.withLock { $0.remove(handle) }
    }

    /// Every handle left, and none from now on.
    func drain() -> [UInt64] {
        shards.flatMap { s in s.handles.withLock { set in defer { set = [] }; return Array(set) } }
    }
}
