// RemoteStatus: what `docdrive status` shows of a store's remote (RemoteState), and the bytes of
// content the store keeps here as last counted.
import Synchronization

/// A store's `RemoteState` (its last poll, offline or not and why, the devices seen, the last
/// download problem, the content kept here), and `cacheUse`: the bytes of content an on-demand
/// store with a cache limit keeps here as last counted (nil before the first count, and in a
/// store without a limit), which each download adds to.
///
/// Rules (`State.broken`, checked after every change):
/// * offline since a time and offline for a reason come together (both or neither);
/// * the last poll's time and the count of polls come together, the count at least 1;
/// * the bytes shown (`RemoteState.cacheBytes`) are the bytes counted (`cacheUse`), never
///   negative.
///
/// Lock: a leaf, held for a look or a change only.
package final class RemoteStatus: Sendable {
    package struct State {
        package var remote = RemoteState()
        package var cacheUse: Int64? = nil

        package init() {}
    }

    private let state = Mutex(State())

    package init() {}

    /// What `docdrive status` shows.
    package var remote: RemoteState { state.withLock { $0.remote } }

    /// The bytes of content kept here as last counted (nil: not counted).
    package var cacheUse: Int64? { state.withLock { $0.cacheUse } }

    // MARK: polls and offline

    /// A poll listed the remote at `time`, which wrote what `devices` names: the store is
    /// online. Returns whether it was offline.
    package func polled(at time: Double, devices: [String]) -> Bool {
        state.withLock { s in
            let was = s.remote.offlineSince != nil
            s.remote.offlineSince = nil
            s.remote.offlineReason = nil
            s.remote.lastPoll = time
            s.remote.lastListing = time
            s.remote.polls = (s.remote.polls ?? 0) + 1
            s.remote.devices = devices
            Invariants.check(s)
            return was
        }
    }

    /// A poll ended at `time` at the remote's fingerprint (nothing changed).
    /// A poll read the remote's journal at `time` (no listing): online. Returns whether it was
    /// offline.
    package func polledJournal(at time: Double) -> Bool {
        state.withLock { s in
            let was = s.remote.offlineSince != nil
            s.remote.offlineSince = nil
            s.remote.offlineReason = nil
            s.remote.lastPoll = time
            s.remote.lastJournal = time
            s.remote.polls = (s.remote.polls ?? 0) + 1
            Invariants.check(s)
            return was
        }
    }

    package func polledUnchanged(at time: Double) {
        state.withLock { s in
            s.remote.lastPoll = time
            s.remote.polls = (s.remote.polls ?? 0) + 1
            Invariants.check(s)
        }
    }

    /// The remote could not be listed at `time`, for `reason`: offline since then, or still
    /// offline since earlier. Returns whether it was online.
    package func unreachable(at time: Double, _ reason: String) -> Bool {
        state.withLock { s in
            let was = s.remote.offlineSince == nil
            if was { s.remote.offlineSince = time }
            s.remote.offlineReason = reason
            Invariants.check(s)
            return was
        }
    }

    /// The store is held offline from `time` for `reason` (`SyncService.hold`).
    package func held(at time: Double, _ reason: String) {
        state.withLock { s in
            s.remote.offlineSince = time
            s.remote.offlineReason = reason
            Invariants.check(s)
        }
    }

    /// The store held offline starts again (`docdrive store retry`).
    package func retried() {
        state.withLock { s in
            s.remote.offlineSince = nil
            s.remote.offlineReason = nil
            Invariants.check(s)
        }
    }

    // MARK: downloads

    /// A fill ended: `problem` (nil: it succeeded) is the store's download problem; a remote
    /// that could not be reached (`unreachable`, at `time`) makes the store offline for
    /// `reason` if it was online.
    package func fillEnded(problem: String?, unreachable: Bool = false, at time: Double = 0, reason: String = "") {
        state.withLock { s in
            s.remote.downloadProblem = problem
            if problem != nil, unreachable, s.remote.offlineSince == nil {
                s.remote.offlineSince = time
                s.remote.offlineReason = reason
            }
            Invariants.check(s)
        }
    }

    /// A download put `bytes` of content here: added to what was counted (if it was).
    package func cacheGrew(by bytes: Int64) {
        state.withLock { s in
            guard let use = s.cacheUse else { return }
            s.cacheUse = use + bytes
            s.remote.cacheBytes = use + bytes
            Invariants.check(s)
        }
    }

    /// The content kept here was counted: `bytes`.
    package func cacheCounted(_ bytes: Int64) {
        state.withLock { s in
            s.cacheUse = bytes
            s.remote.cacheBytes = bytes
            Invariants.check(s)
        }
    }
}

// MARK: rules

extension RemoteStatus.State: CheckedState {
    package var broken: String? {
        if (remote.offlineSince == nil) != (remote.offlineReason == nil) {
            return remote.offlineSince == nil ? "RemoteStatus: offline for a reason, but since no time" : "RemoteStatus: offline since a time, but for no reason"
        }
        if (remote.lastPoll == nil) != (remote.polls == nil) {
            return remote.lastPoll == nil ? "RemoteStatus: \(remote.polls!) polls, but no last poll" : "RemoteStatus: a last poll, but no count of polls"
        }
        if let n = remote.polls, n < 1 { return "RemoteStatus: \(n) polls counted, with a last poll" }
        if let l = remote.lastListing, remote.lastPoll.map({ l > $0 }) ?? true {
            return "RemoteStatus: a whole listing at \(l), after the last poll (\(remote.lastPoll.map { String($0) } ?? "none"))"
        }
        if let j = remote.lastJournal, remote.lastPoll.map({ j > $0 }) ?? true {
            return "RemoteStatus: the journal read at \(j), after the last poll (\(remote.lastPoll.map { String($0) } ?? "none"))"
        }
        if remote.cacheBytes != cacheUse {
            return "RemoteStatus: \(remote.cacheBytes.map(String.init) ?? "no") bytes of content shown, \(cacheUse.map(String.init) ?? "none") counted"
        }
        if let u = cacheUse, u < 0 { return "RemoteStatus: \(u) bytes of content counted" }
        return nil
    }
}

extension RemoteStatus: CheckedState {
    package var broken: String? { state.withLock { $0.broken } }
}
