// StatusChanges: the "something `docdrive status` shows has changed" signal, for the control
// socket's `status-watch` (StatusWatch): raised where the status changes (the upload queue's
// writes, a transfer's progress, a remote going offline or online, a marked path), waited on by
// the threads that push a new DriveStatus to their command. Nothing wakes while nothing changes.
import Foundation
import Synchronization

/// Raised on hot paths (a FUSE request thread, a transfer's progress callback): one atomic load
/// while nobody watches; while someone does, one atomic add and, for the first change since a
/// watcher last looked, a broadcast under the condition's lock.
public final class StatusChanges: @unchecked Sendable {
    /// Watching connections (`status-watch`); 0: `changed()` returns at once.
    private let watchers = Atomic<Int>(0)
    /// Bumped by every change while someone watches.
    private let generation = Atomic<Int>(0)
    /// Set by the first change since a watcher last went to sleep: only that change broadcasts.
    private let signalled = Atomic<Bool>(false)
    private let stopping = Atomic<Bool>(false)
    /// Guards nothing but the waits (the counters are atomic). Lock: leaf.
    private let condition = NSCondition()

    public init() {}

    /// Something the status shows changed.
    @inline(__always)
    public func changed() {
        guard watchers.load(ordering: .relaxed) > 0 else { return }
        generation.add(1, ordering: .acquiringAndReleasing)
        if !signalled.exchange(true, ordering: .acquiringAndReleasing) {
            condition.lock()
            condition.broadcast()
            condition.unlock()
        }
    }

    /// A watcher came (true) or went (false).
    public func watching(_ on: Bool) { watchers.add(on ? 1 : -1, ordering: .acquiringAndReleasing) }

    /// The changes seen so far, for `wait(after:)`.
    public func ticket() -> Int { generation.load(ordering: .acquiring) }

    /// Sleeps until a change newer than `ticket`, until `timeout` seconds passed (then
    /// `ticket()` is still `ticket`), or until `stop`; false only for `stop`. Nothing but the
    /// timeout wakes a watcher while the drive is idle.
    public func wait(after ticket: Int, timeout: Double) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        // Cleared under the lock before the look: a change after it broadcasts, and one before
        // it has already moved the generation (so no wake-up is lost between look and sleep).
        signalled.store(false, ordering: .releasing)
        let deadline = Date(timeIntervalSinceNow: timeout)
        while generation.load(ordering: .acquiring) == ticket && !stopping.load(ordering: .acquiring) {
            guard condition.wait(until: deadline) else { break }
        }
        return !stopping.load(ordering: .acquiring)
    }

    /// Wakes every watcher for good (the daemon stops).
    public func stop() {
        stopping.store(true, ordering: .releasing)
        condition.lock()
        condition.broadcast()
        condition.unlock()
    }
}
