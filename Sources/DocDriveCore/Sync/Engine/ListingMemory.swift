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
///   logged when it changes, not at every poll;
/// * `journal`: on a remote that keeps a journal (`Remote.keepsJournal`), where this device
///   stands in it (set by a whole listing, advanced by each reading) and the time by which a
///   whole listing comes however well the journal reads (the store's `reconcile`); nil before
///   the first whole listing and after a reading that failed: the next poll that is not quiet
///   lists the whole remote;
/// * `since`: what the journal said changed after the last listing, over its ids and paths:
///   `moved` (an id's path now), `deleted` (paths gone; an id listed or moved there is gone).
///
/// Rules (`State.broken`, checked after every change):
/// * without `wholeDue`, `quiet.row` is at most `quietPollsInARow` (then a whole poll comes);
/// * before the first listing (`paths` nil) no id, no duplicate and no quiet poll is known;
/// * every listed id's path is among the listed paths (both come from one listing);
/// * a duplicate id has at least two paths, in byte order;
/// * `unshown` is not negative;
/// * without `journal`, nothing is known `since` the listing; with it, a poll ends quietly at
///   a fingerprint whatever the bases (the journal, not a comparison, finds what changed).
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
        package var journal: (cursor: JournalCursor, wholeDue: Double)? = nil
        /// The journal keys a reading that failed had applied (the bad one among them): the
        /// whole listing after it starts its cursor with them, so it is not read again.
        package var appliedWhenBroken: Set<String> = []
        package var since = Since()

        package init() {}
    }

    /// What a journal said changed since the listing.
    package struct Since {
        package var moved: [String: StorePath] = [:]
        package var deleted: Set<StorePath> = []
        package var isEmpty: Bool { moved.isEmpty && deleted.isEmpty }
    }

    /// What the next poll does, after one HEAD of the fingerprint (`nextPoll`).
    package enum NextPoll: Equatable {
        /// Nothing changed: it ends.
        case quiet
        /// It reads the journal after this cursor.
        case journal(JournalCursor)
        /// It lists the whole remote.
        case whole
    }

    private let state = Mutex(State())

    package init() {}

    // MARK: the listing

    /// A poll listed the remote: its ids, and the hashes of all its paths (made by the caller,
    /// before the lock is taken).
    /// `journal`: the cursor of a remote that keeps a journal, taken before the listing (the
    /// keys it applied lately are kept), and the time by which the next whole listing comes.
    package func listed(ids: ListedIDs, paths: Set<Int>, journal: (cursor: JournalCursor, wholeDue: Double)? = nil) {
        state.withLock { s in
            s.ids = ids
            s.paths = paths
            s.since = Since()
            if var j = journal {
                j.cursor.applied.formUnion(s.journal?.cursor.applied ?? s.appliedWhenBroken)
                j.cursor = j.cursor.advanced(by: [])  // only the keys within its window
                s.appliedWhenBroken = []
                s.journal = j
            } else {
                s.journal = nil
            }
            Invariants.check(s)
        }
    }

    /// A reading of the journal found `changes` (oldest first) and ended at `cursor`: the ids and
    /// paths they name are where they say (the decision of each looks at the remote again).
    package func journaled(_ changes: [JournalChange], cursor: JournalCursor) {
        state.withLock { s in
            guard s.journal != nil, s.paths != nil else { return }
            s.journal?.cursor = cursor
            for c in changes {
                if let from = c.from {
                    s.since.deleted.insert(from)
                    s.paths?.remove(from.hashValue)
                }
                switch c.op {
                case .put, .move:
                    s.since.deleted.remove(c.path)
                    s.paths?.insert(c.path.hashValue)
                    if let id = c.id { s.since.moved[id] = c.path }
                case .delete:
                    s.since.deleted.insert(c.path)
                    s.paths?.remove(c.path.hashValue)
                }
            }
            Invariants.check(s)
        }
    }

    /// A reading of the journal failed: the poll lists the whole remote instead (as does the next
    /// one that is not quiet, if this one fails), keeping what `cursor` applied.
    package func journalBroken(cursor: JournalCursor) {
        state.withLock { s in
            s.appliedWhenBroken = cursor.applied
            s.journal = nil
            s.since = Since()
            s.quiet = nil
            Invariants.check(s)
        }
    }

    /// Where the last listing had the item `id`, or where the journal since says it is.
    package func path(ofID id: String) -> StorePath? {
        state.withLock { s in
            if let p = s.since.moved[id] { return s.since.deleted.contains(p) ? nil : p }
            return s.ids[id].flatMap { s.since.deleted.contains($0) ? nil : $0 }
        }
    }

    /// The paths with an id the last listing had directly in `folder` (and the journal since).
    package func inFolder(_ folder: StorePath) -> [StorePath] {
        state.withLock { s in
            var out = s.ids.inFolder(folder)  // fills a cache: no rule changes (see above)
            guard !s.since.isEmpty else { return out }
            out.removeAll { s.since.deleted.contains($0) }
            let known = Set(out)
            out += Set(s.since.moved.values).filter { $0.folder == folder && !known.contains($0) && !s.since.deleted.contains($0) }
            return out
        }
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
        nextPoll(fingerprint: fingerprint, bases: bases, now: now) == .quiet
    }

    /// What a poll that found `fingerprint` with the bases at `bases` does at `now`: ends
    /// (`endsQuietly`; with a journal, whatever the bases), reads the journal (there is one, and
    /// the whole listing is not due), or lists the whole remote.
    package func nextPoll(fingerprint: [UInt8], bases: UInt64, now: Double) -> NextPoll {
        state.withLock { s in
            if s.wholeWanted {
                s.wholeWanted = false
                return .whole
            }
            if let q = s.quiet, q.fingerprint == fingerprint, q.bases == bases || s.journal != nil,
               q.wholeDue.map({ now < $0 }) ?? (q.row < Self.quietPollsInARow) {
                s.quiet?.row += 1
                Invariants.check(s)
                return .quiet
            }
            if let j = s.journal, now < j.wholeDue { return .journal(j.cursor) }
            return .whole
        }
    }

    /// The time by which the next whole listing comes on a journal (nil: no journal).
    package var journalWholeDue: Double? { state.withLock { $0.journal?.wholeDue } }

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
        if journal == nil, !since.isEmpty { return "ListingMemory: journal changes known without a journal" }
        var notListed: StorePath?
        ids.forEachPath { p in if notListed == nil, !paths.contains(p.hashValue), !since.deleted.contains(p) { notListed = p } }
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
