// ListingMemory: what a store's sync keeps of the last listing of its remote until the next one:
// the items' ids and paths, ids found at several paths, and the last poll that found nothing.
import Synchronization

/// What the last listing of a store's remote showed, kept until the next poll:
/// * `ids`: where each item id was listed (renames made on another device, what a folder made
///   or placed holds: `ListedIDs`);
/// * `paths`: the hashes of every listed path (files, folders, links), nil before the first
///   listing: a path that is not among them is new since (`StoreSync.newHereID`); two paths of
///   one hash only cost the usual look at the remote;
/// * `duplicates`: item ids listed at several paths (files and links), with those paths and when
///   they were first listed so (`StoreSync.healDuplicateIDs`);
/// * `quiet`: the last poll that found nothing to do: the remote's fingerprint, taken before
///   its listing, and the bases' generation, read before it compared them. A poll that finds
///   both the same would compare the same listing with the same bases and find nothing again:
///   it ends there, without reading every item's metadata; `row` counts such polls since the
///   last whole one. `wholeDue`: for a fingerprint that does not see every writer (S3's change
///   mark sees DocDrive's writes, not another tool's: `Remote.fingerprintSeesEveryWriter`), the
///   time by which a whole poll comes (the store's `reconcile`), instead of a count;
/// * `wholeWanted`: the next poll that could end quietly is a whole one (`docdrive sync` asks for
///   it: what another tool wrote is seen then, not at the reconcile);
/// * `unshown`: how many objects the last listing left unshown (`RemoteListing.unshown`),
///   logged when it changes, not at every poll.
///
/// Rules (`State.broken`, checked after every change):
/// * without `wholeDue`, `quiet.row` is at most `quietPollsInARow` (then a whole poll comes);
/// * before the first listing (`paths` nil) no id, no duplicate and no quiet poll is known;
/// * every listed id's path is among the listed paths (both come from one listing);
/// * a duplicate id has at least two paths, in byte order;
/// * `unshown` is not negative.
/// (`ids`' folders, sorted out at the first question after a listing, `inFolder`, are a cache
/// of the same listing: filling it changes no rule, and is not checked, which would cost a
/// look at every id per folder asked about.)
///
/// Lock: a leaf, held for a look-up or a change only; a listing's tables are made before it is
/// taken.
package final class ListingMemory: Sendable {
    /// At most this many polls in a row end at the fingerprint; the next is a whole one (the
    /// limit of what a fingerprint can miss: FolderRemote.fingerprint).
    package static let quietPollsInARow = 9

    package struct State {
        package var ids = ListedIDs()
        package var paths: Set<Int>? = nil
        package var duplicates: [String: (paths: [StorePath], since: Double)] = [:]
        package var quiet: (fingerprint: [UInt8], bases: UInt64, row: Int, wholeDue: Double?)? = nil
        package var unshown = 0
        package var wholeWanted = false

        package init() {}
    }

    private let state = Mutex(State())

    package init() {}

    // MARK: the listing

    /// A poll listed the remote: its ids, and the hashes of all its paths (made by the caller,
    /// before the lock is taken).
    package func listed(ids: ListedIDs, paths: Set<Int>) {
        state.withLock { s in
            s.ids = ids
            s.paths = paths
            Invariants.check(s)
        }
    }

    /// Where the last listing had the item `id`.
    package func path(ofID id: String) -> StorePath? {
        state.withLock { $0.ids[id] }
    }

    /// The paths with an id the last listing had directly in `folder`.
    package func inFolder(_ folder: StorePath) -> [StorePath] {
        state.withLock { $0.ids.inFolder(folder) }  // fills a cache: no rule changes (see above)
    }

    /// Whether a listing was made and did not hold `path` (nil: no listing yet).
    package func wasNotListed(_ path: StorePath) -> Bool? {
        state.withLock { $0.paths.map { !$0.contains(path.hashValue) } }
    }

    /// The listing left `count` objects unshown: whether that number changed since the last.
    package func noteUnshown(_ count: Int) -> Bool {
        state.withLock { s in
            let changed = s.unshown != count
            s.unshown = count
            Invariants.check(s)
            return changed
        }
    }

    // MARK: ids at several paths

    /// The ids at several paths this listing `found` (each with its items) that were listed at
    /// the same paths for `grace` seconds until `now`: due to be healed. The others are kept
    /// from now (or since they were first listed at these paths); ids not found are forgotten.
    package func duplicatesDue(_ found: [String: [RemoteItem]], now: Double, grace: Double) -> [(String, [RemoteItem])] {
        state.withLock { s in
            var due = [(String, [RemoteItem])]()
            var next = [String: (paths: [StorePath], since: Double)]()
            for (id, items) in found {
                let paths = items.map(\.path).sorted { $0.bytes.lexicographicallyPrecedes($1.bytes) }
                if let seen = s.duplicates[id], seen.paths == paths {
                    next[id] = seen
                    if now - seen.since >= grace { due.append((id, items)) }
                } else {
                    next[id] = (paths, now)
                }
            }
            s.duplicates = next
            Invariants.check(s)
            return due
        }
    }

    /// The duplicate ids at any of `paths` are forgotten (healed there).
    package func forgetDuplicates(at paths: [StorePath]) {
        state.withLock { s in
            for p in paths { s.duplicates = s.duplicates.filter { !$0.value.paths.contains(p) } }
            Invariants.check(s)
        }
    }

    // MARK: quiet polls

    /// Whether a poll may end here, at `fingerprint` with the bases at `bases`, at `now`: both
    /// are those of the last poll that found nothing, and fewer than `quietPollsInARow` polls in
    /// a row ended so (counted then), or, where that poll set a time for the next whole one, it
    /// is not yet.
    package func endsQuietly(fingerprint: [UInt8], bases: UInt64, now: Double) -> Bool {
        state.withLock { s in
            if s.wholeWanted {
                s.wholeWanted = false
                return false
            }
            guard let q = s.quiet, q.fingerprint == fingerprint, q.bases == bases,
                  q.wholeDue.map({ now < $0 }) ?? (q.row < Self.quietPollsInARow) else { return false }
            s.quiet?.row += 1
            Invariants.check(s)
            return true
        }
    }

    /// The next poll that could end quietly lists the whole remote (a poll already running may
    /// still end quietly).
    package func wantWhole() {
        state.withLock { $0.wholeWanted = true }
    }

    /// A poll compares the listing with the bases: the last quiet one is forgotten.
    package func forgetQuiet() {
        state.withLock { s in
            s.quiet = nil
            Invariants.check(s)
        }
    }

    /// A poll found nothing to do at `fingerprint` with the bases at `bases`; `wholeDue`: the
    /// time by which a whole poll must come however quiet (nil: after `quietPollsInARow`).
    package func foundNothing(fingerprint: [UInt8], bases: UInt64, wholeDue: Double? = nil) {
        state.withLock { s in
            s.quiet = (fingerprint, bases, 0, wholeDue)
            Invariants.check(s)
        }
    }
}

// MARK: rules

extension ListingMemory.State: CheckedState {
    package var broken: String? {
        if let q = quiet, q.row < 0 || q.wholeDue == nil && q.row > ListingMemory.quietPollsInARow {
            return "ListingMemory: \(q.row) quiet polls in a row, more than \(ListingMemory.quietPollsInARow)"
        }
        guard let paths else {
            if !ids.isEmpty { return "ListingMemory: ids known before the first listing" }
            if !duplicates.isEmpty { return "ListingMemory: duplicate ids known before the first listing" }
            if quiet != nil { return "ListingMemory: a quiet poll before the first listing" }
            return unshown < 0 ? "ListingMemory: \(unshown) objects unshown" : nil
        }
        var notListed: StorePath?
        ids.forEachPath { p in if notListed == nil, !paths.contains(p.hashValue) { notListed = p } }
        if let notListed { return "ListingMemory: the listed id at \(notListed) is not among the listed paths" }
        for (id, d) in duplicates {
            if d.paths.count < 2 { return "ListingMemory: the duplicate id \(id) is at \(d.paths.count) path\(d.paths.count == 1 ? "" : "s")" }
            for k in d.paths.indices.dropFirst() where !d.paths[k - 1].bytes.lexicographicallyPrecedes(d.paths[k].bytes) {
                return "ListingMemory: the paths of the duplicate id \(id) are not in byte order (\(d.paths[k - 1]), \(d.paths[k]))"
            }
        }
        return unshown < 0 ? "ListingMemory: \(unshown) objects unshown" : nil
    }
}

extension ListingMemory: CheckedState {
    package var broken: String? { state.withLock { $0.broken } }
}
