// DeferredFrees: what removing a file's last name frees is freed off the request thread.
import Dispatch
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A file's blocks are freed when its last name is gone and nothing holds it any more. In an
/// unlinkat(2) or renameat(2) that drops the last reference, the backing file system frees them
/// inside the call: on an ext4 mounted with `discard` every freed extent is trimmed there,
/// synchronously (`ext4_free_blocks` -> `blkdev_issue_discard`), tens of microseconds for a
/// small file and milliseconds for a large one, while the kernel's request (and the `rm`
/// behind it) waits.
///
/// So `unlink`, `rmdir` and a `rename` onto a file hold the file being removed with an O_PATH
/// descriptor across the call when removing it frees blocks, and hand the descriptor here: the
/// request is answered at once, and this class's thread closes the descriptor, which frees the
/// blocks a moment later. XFS frees unlinked inodes in the background the same way (its
/// deferred inode inactivation).
///
/// At most `most` descriptors wait; past that the caller closes its own (the file is freed on
/// the request thread, as before), so the queue never holds more than 512 of the process's
/// descriptors. `statfs` waits for the queue first (`settle`), so `df` after `rm` counts the
/// space as free. A removal frees later only while its file system has `spareRoom` free (and
/// twice the file's size): on a nearly full disk, where someone removes a file to make room
/// and writes again at once, the room is there when the unlink returns.
///
/// Lock: `state` is a leaf.
package final class DeferredFrees: Sendable {
    private struct State {
        var fds: [Int32] = []
        /// Descriptors the thread has taken and not closed yet.
        var closing = 0
        /// The thread runs (or was woken): a new descriptor needs no signal.
        var awake = false
        var started = false
        var stopping = false
    }
    private let state = Mutex(State())
    private let wake = DispatchSemaphore(value: 0)
    /// Tests hold the closing back to see what waits.
    private let paused = Atomic<Bool>(false)
    package static let most = 512
    /// Free space (bytes) below which removals free at once.
    static let spareRoom: UInt64 = 1 << 30

    /// Takes `fd` (a descriptor of a file just removed) to close off this thread; false when
    /// the queue is full, and the caller closes it itself.
    func hand(_ fd: Int32) -> Bool {
        let (taken, signal, start) = state.withLock { s -> (Bool, Bool, Bool) in
            guard !s.stopping, s.fds.count + s.closing < Self.most else { return (false, false, false) }
            s.fds.append(fd)
            let start = !s.started
            s.started = true
            if s.awake { return (true, false, start) }
            s.awake = true
            return (true, true, start)
        }
        if start { Sys.startThread("docdrive-frees", kernelName: "dd-frees") { [self] in run() } }
        if signal { wake.signal() }
        return taken
    }

    /// Returns once every descriptor handed before the call is closed, or after `timeout` s.
    package func settle(timeout: Double = 2) {
        guard waiting > 0 else { return }
        let deadline = Sys.monotonicNanoseconds() + Int64(timeout * 1e9)
        while waiting > 0, Sys.monotonicNanoseconds() < deadline { usleep(200) }
    }

    /// Descriptors handed and not closed yet.
    package var waiting: Int { state.withLock { $0.fds.count + $0.closing } }

    /// Closes what waits and ends the thread (the file system's shutdown).
    func stop() {
        resume()
        settle()
        let signal = state.withLock { s -> Bool in
            s.stopping = true
            return s.started
        }
        if signal { wake.signal() }
    }

    /// For tests: hold the closing back until `resume`.
    package func pause() { paused.store(true, ordering: .sequentiallyConsistent) }
    package func resume() { paused.store(false, ordering: .sequentiallyConsistent) }

    private func run() {
        while true {
            wake.wait()
            while paused.load(ordering: .sequentiallyConsistent) { usleep(1000) }
            while true {
                let (batch, stop) = state.withLock { s -> ([Int32], Bool) in
                    if s.fds.isEmpty { s.awake = false }
                    defer { s.fds.removeAll(keepingCapacity: true) }
                    s.closing = s.fds.count
                    return (s.fds, s.stopping)
                }
                for fd in batch { Sys.close(fd) }
                state.withLock { $0.closing = 0 }
                if stop && batch.isEmpty { return }
                if batch.isEmpty { break }
            }
        }
    }
}
