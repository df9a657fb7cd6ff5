// Readahead: file-level readahead for an on-demand store's small placeholders. A program that
// opens the files of a folder one after another (grep -r, cp -r, tar, a photo viewer) would
// wait for one download per file; once two placeholders of one folder were opened in a row,
// the folder's other small placeholders download ahead, a few at a time, in the order the
// program reads in: the folder's listing (cp -r, tar, grep -r, find) or its names sorted by
// their bytes (shell globs, rsync, file managers), whichever puts the first open closer
// before the second. What is downloaded ahead and not opened
// yet never exceeds what the program opened in the sequence (at least `firstWindow`): a
// guess costs at most as much as what was asked for. One open alone (`cat`) never downloads
// anything else; a store with a cache limit, or `readahead: off`, never reads ahead.
import Foundation
import Synchronization

/// The readahead state of one store. Bookkeeping only: the caller scans folders and downloads.
/// Lock: `state` is a leaf.
public final class Readahead: Sendable {
    /// A file of the folder; `fetch`: a small placeholder, which may be downloaded ahead
    /// (the others only tell the order the program reads in).
    public struct Candidate: Equatable, Sendable {
        public var path: StorePath
        public var ino: UInt64
        public var fetch: Bool
        public init(path: StorePath, ino: UInt64, fetch: Bool = true) {
            self.path = path
            self.ino = ino
            self.fetch = fetch
        }
    }

    /// Files larger than this are never read ahead (their open waits as before).
    public static let smallFile: Int64 = 1 << 20
    /// Files ahead and not opened at the start of a sequence (more as more are opened).
    public static let firstWindow = 4
    /// Downloads ahead at once.
    public static let maxInFlight = 8
    /// Two opens of one folder further apart than this are no sequence.
    public static let streakSeconds = 2.0

    private struct State {
        var folder: StorePath?
        var last = 0.0
        /// The file opened last in this sequence.
        var lastOpened: StorePath?
        /// Distinct files of `folder` opened in this sequence.
        var opened = Set<StorePath>()
        /// Whether the folder was scanned: the sequence reads ahead.
        var reading = false
        /// A download ahead failed: this sequence reads nothing more ahead.
        var stopped = false
        /// Downloaded (or downloading) ahead and not opened yet, by inode.
        var ahead = [UInt64: StorePath]()
        var inFlight = 0
        /// The folder's small placeholders, in its listing's order after the opened one.
        var candidates = [Candidate]()
        var next = 0
    }

    private let state = Mutex(State())

    public init() {}
    /// Whether a sequence reads ahead now: opens of files that are here already ask only then.
    public let active = Atomic<Bool>(false)

    /// An open of the placeholder `path` asked for its content. `scan` lists the folder's
    /// files (in listing order), called only when a sequence starts. Returns what to download
    /// ahead now.
    public func openedPlaceholder(_ path: StorePath, now: Double, scan: (StorePath) -> [Candidate]) -> [Candidate] {
        let folder = path.folder
        let (wantScan, previous) = state.withLock { s -> (Bool, StorePath?) in
            // Still downloading ahead: a hit (after a pause too, the sequence goes on).
            let hit = s.folder == folder ? s.ahead.first(where: { $0.value == path })?.key : nil
            if hit == nil, s.folder != folder || now - s.last >= Self.streakSeconds {
                s = State()
                s.folder = folder
            }
            if let hit { s.ahead.removeValue(forKey: hit) }
            s.last = now
            s.opened.insert(path)
            defer { s.lastOpened = path }
            return (!s.reading && !s.stopped && s.opened.count >= 2, s.lastOpened)
        }
        let found = wantScan ? Self.inReadingOrder(scan(folder), previous: previous, current: path) : nil
        return state.withLock { s -> [Candidate] in
            defer { active.store(s.reading, ordering: .relaxed) }
            if let found, s.folder == folder, !s.reading {
                s.reading = true
                s.candidates = found
                s.next = 0
            }
            return Self.topUp(&s)
        }
    }

    /// An open of a file that is here already: when it was downloaded ahead (a hit), more may
    /// go. Returns what to download ahead now.
    public func openedFile(ino: UInt64, now: Double) -> [Candidate] {
        state.withLock { s -> [Candidate] in
            guard let path = s.ahead.removeValue(forKey: ino) else { return [] }
            s.opened.insert(path)
            s.last = now
            return Self.topUp(&s)
        }
    }

    /// A download ahead ended: the next may go; after a failure (offline, gone) nothing more
    /// is read ahead in this sequence.
    public func finished(_ c: Candidate, failed: Bool) -> [Candidate] {
        state.withLock { s -> [Candidate] in
            defer { active.store(s.reading, ordering: .relaxed) }
            s.inFlight = max(0, s.inFlight - 1)
            if failed {
                s.reading = false
                s.stopped = true
                s.candidates = []
                s.ahead = [:]
                return []
            }
            return Self.topUp(&s)
        }
    }

    /// The small placeholders of `files` (a folder's, in listing order) after `current`, in
    /// the order a program that opened `previous` and then `current` reads in: the listing's,
    /// or the names' byte order when `previous` is closer before `current` there (ties: the
    /// listing). The list goes round to the start of the folder after its end.
    public static func inReadingOrder(_ files: [Candidate], previous: StorePath?, current: StorePath) -> [Candidate] {
        /// How many places after `previous` `current` is in `list` (round), nil if not there.
        func gap(_ list: [Candidate], after previous: StorePath) -> Int? {
            guard let i = list.firstIndex(where: { $0.path == previous }),
                  let j = list.firstIndex(where: { $0.path == current }) else { return nil }
            return (j - i + list.count) % list.count
        }
        var list = files
        // Name order only competes when there is a step to measure: `previous` is another file
        // than `current` and both are in the folder (so in its sorted names too).
        if let previous, previous != current, let inListing = gap(files, after: previous) {
            let byName = files.sorted { $0.path < $1.path }
            if let n = gap(byName, after: previous), n < inListing { list = byName }
        }
        let after = (list.firstIndex { $0.path == current }).map { $0 + 1 } ?? 0
        return (list[after...] + list[..<after]).filter { $0.fetch && $0.path != current }
    }

    /// The next candidates, while the downloads at once and the files ahead stay in bounds.
    private static func topUp(_ s: inout State) -> [Candidate] {
        guard s.reading else { return [] }
        var out = [Candidate]()
        let window = max(firstWindow, s.opened.count)
        while s.inFlight < maxInFlight, s.ahead.count < window, s.next < s.candidates.count {
            let c = s.candidates[s.next]
            s.next += 1
            if s.opened.contains(c.path) { continue }
            s.ahead[c.ino] = c.path
            s.inFlight += 1
            out.append(c)
        }
        return out
    }
}
