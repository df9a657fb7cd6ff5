// PollCounters: how many looks at a store's remote (polls) started and ended since the mount, and
// whether one is wanted now.
import Synchronization

/// The polls of a store since the mount: started (`start`), ended (`end`; a `docdrive sync`
/// waits for one that started after it asked, `SyncService.polledSince`), and of those ended the
/// quiet ones, which ended at the remote's fingerprint (`StoreSync.startPoll`); and whether a
/// poll is wanted now (`want`: `docdrive sync`, a path waiting for a listing), which the
/// poller takes (`takeWanted`).
///
/// Rules (`broken`, checked after every change):
/// * ended <= started: a poll ends after it starts;
/// * quiet <= ended: a quiet poll is counted once it ended.
/// (Polls may overlap, a reconcile's beside the poller's, so started may be ahead of ended by
/// more than one.)
///
/// No lock: each count is one atomic, read without waiting by `docdrive sync` and the workers.
/// A poll's end adds to ended before quiet, and a reader loads quiet, then ended, then started
/// (sequentially consistent), so that the rules hold for any reader at any time.
package final class PollCounters: Sendable {
    private let startedCount: Atomic<Int>
    private let endedCount: Atomic<Int>
    private let quietCount: Atomic<Int>
    private let wanted = Atomic<Bool>(false)

    /// Counts from nothing (a test gives others).
    package init(started: Int = 0, ended: Int = 0, quiet: Int = 0) {
        startedCount = Atomic(started)
        endedCount = Atomic(ended)
        quietCount = Atomic(quiet)
    }

    package var started: Int { startedCount.load(ordering: .sequentiallyConsistent) }
    package var ended: Int { endedCount.load(ordering: .sequentiallyConsistent) }
    package var quiet: Int { quietCount.load(ordering: .sequentiallyConsistent) }

    /// A poll starts.
    package func start() {
        startedCount.add(1, ordering: .sequentiallyConsistent)
        Invariants.check(self)
    }

    /// A poll ended; `quiet`: at the remote's fingerprint.
    package func end(quiet: Bool) {
        endedCount.add(1, ordering: .sequentiallyConsistent)
        if quiet { quietCount.add(1, ordering: .sequentiallyConsistent) }
        Invariants.check(self)
    }

    /// Asks the poller for a poll now.
    package func want() { wanted.store(true, ordering: .relaxed) }

    /// Whether a poll was asked for since the last call (the poller's).
    package func takeWanted() -> Bool { wanted.exchange(false, ordering: .relaxed) }
}

// MARK: rules

extension PollCounters: CheckedState {
    package var broken: String? {
        let q = quiet, e = ended, s = started  // in this order (see the declaration)
        if e > s { return "PollCounters: \(e) polls ended of \(s) started" }
        if q > e { return "PollCounters: \(q) quiet polls of \(e) ended" }
        return nil
    }
}
