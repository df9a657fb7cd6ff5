// ListingWaits: what a store's sync waits for a listing of its remote to show: paths to decide
// again after a listing, and creates of this device that no listing has shown yet.
import Synchronization

/// What waits for a listing of a store's remote, each with how many polls had started when it
/// began waiting (`PollCounters.started`):
/// * `noticed`: paths that wait for a listing made after they were looked at
///   (`StoreSync.listedSinceNoticed`), until their path is decided (`decided`);
/// * `creates`: files this device created on the remote (written where nothing was, on a
///   remote that names a write's parent: S3) that no listing has shown yet, with the version
///   written. Another create found in its place before a listing showed it was made by a
///   writer that never saw it (`SyncDecision.createdOver`). In memory: a restart forgets them.
///
/// Rules (`State.broken`, checked after every change):
/// * no mark is ahead of the polls started (`polls`): a count is taken from it, and it only
///   grows;
/// * at most `limit` (10,000) creates are kept: the table is emptied when full, as if a listing
///   had shown them all (a file not shown only loses the `createdOver` check).
///
/// Lock: a leaf, held for a look-up or a change only (the poll counts are atomics, read under it).
package final class ListingWaits: Sendable {
    /// The most unlisted creates kept.
    package static let limit = 10_000

    package struct State {
        /// The polls of the same store, whose starts the marks are taken from.
        package let polls: PollCounters
        package var noticed: [StorePath: Int] = [:]
        package var creates: [StorePath: (version: String, polls: Int)] = [:]

        package init(polls: PollCounters) { self.polls = polls }
    }

    private let state: Mutex<State>

    package init(polls: PollCounters) { state = Mutex(State(polls: polls)) }

    // MARK: paths waiting for a listing

    /// How many polls had started when `path` first waited for a listing (now, if it was not
    /// waiting).
    package func noticed(_ path: StorePath) -> Int {
        state.withLock { s in
            if let at = s.noticed[path] { return at }
            let now = s.polls.started
            s.noticed[path] = now
            Invariants.check(s)
            return now
        }
    }

    /// `path` was decided: it waits for no listing any more.
    package func decided(_ path: StorePath) {
        state.withLock { s in
            guard s.noticed.removeValue(forKey: path) != nil else { return }
            Invariants.check(s)
        }
    }

    // MARK: creates not listed yet

    /// The upload `version` at `path` was a create (`isCreate`: it names `RemoteMeta.created` as
    /// its parent), kept until a listing shows it; or it was not, and what was kept there goes.
    package func uploaded(_ path: StorePath, version: String, isCreate: Bool) {
        state.withLock { s in
            if !isCreate {
                s.creates.removeValue(forKey: path)
            } else {
                if s.creates.count >= Self.limit { s.creates.removeAll() }
                s.creates[path] = (version, s.polls.started)
            }
            Invariants.check(s)
        }
    }

    /// The version this device created at `path` that no listing has shown yet.
    package func unlistedCreate(at path: StorePath) -> String? {
        state.withLock { $0.creates[path]?.version }
    }

    /// How many unlisted creates are kept.
    package var createsKept: Int { state.withLock { $0.creates.count } }

    /// The create at `path` was decided on (the decision saw it replaced): forgotten.
    package func forgetCreate(at path: StorePath) {
        state.withLock { s in
            _ = s.creates.removeValue(forKey: path)
            Invariants.check(s)
        }
    }

    /// What a reading of the journal tells of the creates no listing had shown (`named`: the
    /// versions its changes name at their paths, nil for a delete or a write with none): as a
    /// listing would, where a path it does not name is unchanged since the last poll, so a
    /// create there is seen once a poll made after it ended (`done`).
    package func journaled(named: [StorePath: String?], done: Int) {
        state.withLock { s in
            guard !s.creates.isEmpty else { return }
            s.creates = s.creates.filter { path, c in
                guard let named = named[path] else { return done < c.polls }
                return named != c.version  // another write there: its decision looks
            }
            Invariants.check(s)
        }
    }

    /// What the listing of a poll (`items`, `at`) tells of the creates no listing had shown: one
    /// it shows is seen; one a listing made after it (`done` polls had ended before this one)
    /// shows replaced by another create is kept for its path's decision, and otherwise forgotten.
    package func listed(_ items: [RemoteItem], at: [StorePath: Int], done: Int) {
        state.withLock { s in
            guard !s.creates.isEmpty else { return }
            s.creates = s.creates.filter { path, c in
                guard let k = at[path] else { return done < c.polls }
                let r = items[k]
                if r.version == c.version { return false }
                return done < c.polls || (r.kind == .file && r.meta.parent == RemoteMeta.created)
            }
            Invariants.check(s)
        }
    }
}

// MARK: rules

extension ListingWaits.State: CheckedState {
    package var broken: String? {
        if creates.count > ListingWaits.limit { return "ListingWaits: \(creates.count) unlisted creates kept, more than \(ListingWaits.limit)" }
        let started = polls.started
        if let (p, at) = noticed.first(where: { $0.value > started }) {
            return "ListingWaits: \(p) waits for a listing since poll \(at), but \(started) polls started"
        }
        if let (p, c) = creates.first(where: { $0.value.polls > started }) {
            return "ListingWaits: the create at \(p) was made at poll \(c.polls), but \(started) polls started"
        }
        return nil
    }
}

extension ListingWaits: CheckedState {
    package var broken: String? { state.withLock { $0.broken } }
}
