// QueryNames: the folded name of every row of the query index, in memory, so that a word is found
// by one scan of a byte buffer instead of SQLite's scan of the names' index.
//
// Why: over 100,000 rows SQLite's `instr` scan of the index of folded names took 5-7 ms of a name
// query, most of the daemon's part of it; the same 2.5 MB scanned in memory (dd_scan_entries)
// takes well under a millisecond. It is a filter only: the query's SQL still checks every
// condition on the rows it names, so a stale entry (a row deleted or renamed since) costs a
// lookup, never a wrong answer. What must hold is the other way: every row's current name is in
// here (QueryIndex.apply appends each row it inserts or changes, in the same transaction).
import CDocDriveSys
import Synchronization

final class QueryNames: Sendable {
    struct Entries {
        /// Each entry's folded name followed by a NUL byte (names cannot hold NUL).
        var bytes = [UInt8]()
        /// Where each entry starts in `bytes`, ascending.
        var starts = [UInt32]()
        /// Each entry's rowid in `entry`.
        var ids = [Int64]()
        /// Rows in the table when the entries were last built; entries beyond it are appended
        /// rows and stale copies.
        var rowsAtBuild = 0

        mutating func append(id: Int64, fold: String) {
            starts.append(UInt32(bytes.count))
            ids.append(id)
            bytes += fold.utf8
            bytes.append(0)
        }
    }

    /// Lock: a leaf. Held during a scan (under a millisecond) and an append.
    private let entries = Mutex<Entries?>(nil)

    /// The most rowids a scan hands to SQL; beyond it the query scans in SQL as before (a lookup
    /// per row costs about as much as SQLite's scan once the hits are thousands).
    static let maxCandidates = 2000

    /// Replaces every entry (after a walk, or when stale copies outnumber the rows).
    func replace(_ e: Entries) {
        entries.withLock { $0 = e }
    }

    /// Appends rows inserted or changed; true when the entries should be built again (more stale
    /// copies than rows at the last build).
    func append(_ rows: [(Int64, String)]) -> Bool {
        guard !rows.isEmpty else { return false }
        return entries.withLock { e -> Bool in
            guard e != nil else { return false }
            for (id, fold) in rows { e!.append(id: id, fold: fold) }
            return e!.ids.count > 2 * e!.rowsAtBuild + 10_000
        }
    }

    /// Forgets every entry: queries scan in SQL until the next rebuild.
    func clear() { entries.withLock { $0 = nil } }

    /// The rowids whose names contain `word` (folded, not empty), or nil: not built yet, or more
    /// than `maxCandidates`.
    func candidates(_ word: String) -> [Int64]? {
        let needle = Array(word.utf8)
        guard !needle.isEmpty, !needle.contains(0) else { return nil }
        return entries.withLock { e -> [Int64]? in
            guard let e else { return nil }
            var offsets = [UInt32](repeating: 0, count: Self.maxCandidates)
            let n = e.bytes.withUnsafeBufferPointer { b in
                needle.withUnsafeBufferPointer { w in
                    offsets.withUnsafeMutableBufferPointer { o in
                        dd_scan_entries(b.baseAddress, b.count, w.baseAddress, w.count, o.baseAddress, o.count)
                    }
                }
            }
            guard n <= Self.maxCandidates else { return nil }
            var ids = [Int64]()
            ids.reserveCapacity(n)
            var lo = 0
            for off in offsets[0..<n] {
                // The entry starting at `off` (offsets ascend, so the search starts where the last ended).
                var hi = e.starts.count
                while lo < hi {
                    let mid = (lo + hi) / 2
                    if e.starts[mid] < off { lo = mid + 1 } else { hi = mid }
                }
                ids.append(e.ids[lo])
            }
            return ids
        }
    }

    var isBuilt: Bool { entries.withLock { $0 != nil } }
}
