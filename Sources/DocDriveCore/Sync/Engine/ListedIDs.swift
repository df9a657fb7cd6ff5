/// The paths of the items with an id in the last listing of a store's remote: where each id is
/// (a rename made on another device), and what each folder holds (the children of a folder the
/// sync makes on the remote or places here are looked at with it).
///
/// What a folder holds is sorted out once per listing, at the first question, not per folder:
/// a tree of 600 folders unpacked into a store of 100,000 items asked 600 times of every item.
///
/// Kept for the whole time between two polls, so kept small: an id as the drive makes them (a
/// UUID in lower case, `ItemIndex.newID`, `DuplicateIDs.derived`) is kept as its 16 bytes, not
/// as the listing's string of it (an 80-byte block each, which also kept the listing's memory
/// from going back whole: a store of 100,000 items held about 8 MB more between polls). Any
/// other id (another tool's, a damaged one) is kept as it is.
public struct ListedIDs: Sendable {
    /// An item with an id in the drive's form: its path is `paths[start..<start + length]`.
    private struct Entry {
        let id: UUIDBytes
        let start: UInt32
        let length: UInt32
    }

    /// The paths of `entries`, one after another: one allocation, where a path each was 100,000
    /// small ones made after every poll of a large store, scattered among what the poll frees
    /// (so its pages could not go back).
    private var paths = [UInt8]()
    private var entries = [Entry]()
    /// Open addressing over `entries` (linear probing, at most half full): an entry's number + 1,
    /// 0 for an empty bucket. Not a `ProbedTable` of entries: its buckets would be 32 bytes (an
    /// optional entry) at up to three quarters full, about 8 MB for 100,000 ids against 3.4 here;
    /// the table is made once per listing and never changes.
    private var buckets = [UInt32]()
    private var others: [String: StorePath] = [:]
    /// The paths by their folder; nil until asked for after a listing.
    private var byFolder: [StorePath: [StorePath]]?

    public init(byID: [String: StorePath] = [:]) {
        entries.reserveCapacity(byID.count)
        for (id, path) in byID {
            if let u = UUIDBytes(id), paths.count + path.bytes.count <= Int(UInt32.max), entries.count < Int(UInt32.max) {
                entries.append(Entry(id: u, start: UInt32(paths.count), length: UInt32(path.bytes.count)))
                paths += path.bytes
            } else {
                // A copy of the path: the listing's own is among its transient allocations.
                others[id] = StorePath(bytes: path.bytes.withUnsafeBufferPointer { Array($0) })
            }
        }
        var n = 16
        while n < entries.count * 2 { n *= 2 }
        buckets = [UInt32](repeating: 0, count: entries.isEmpty ? 0 : n)
        for (k, e) in entries.enumerated() {
            var i = bucket(of: e.id)
            while buckets[i] != 0 { i = (i + 1) & (buckets.count - 1) }
            buckets[i] = UInt32(k + 1)
        }
    }

    private func bucket(of id: UUIDBytes) -> Int {
        let h = (id.high ^ (id.low &* 0xBF58_476D_1CE4_E5B9)) &* 0x9E37_79B9_7F4A_7C15
        return Int(truncatingIfNeeded: h >> UInt64(64 - buckets.count.trailingZeroBitCount))
    }

    private func path(of e: Entry) -> StorePath {
        StorePath(bytes: Array(paths[Int(e.start)..<Int(e.start) + Int(e.length)]))
    }

    /// Where the item `id` was listed.
    public subscript(id: String) -> StorePath? {
        guard let u = UUIDBytes(id) else { return others[id] }
        guard !buckets.isEmpty else { return others[id] }
        var i = bucket(of: u)
        while buckets[i] != 0 {
            let e = entries[Int(buckets[i]) - 1]
            if e.id == u { return path(of: e) }
            i = (i + 1) & (buckets.count - 1)
        }
        return others[id]  // a UUID whose path did not fit in `paths`
    }

    /// Whether no id was listed.
    public var isEmpty: Bool { entries.isEmpty && others.isEmpty }

    /// Calls `body` with the path of every listed id, in no particular order.
    public func forEachPath(_ body: (StorePath) -> Void) {
        for e in entries { body(path(of: e)) }
        for p in others.values { body(p) }
    }

    /// The listed paths (with an id) directly in `folder`, in no particular order.
    public mutating func inFolder(_ folder: StorePath) -> [StorePath] {
        if let byFolder { return byFolder[folder] ?? [] }
        var made = [StorePath: [StorePath]]()
        for e in entries {
            let p = path(of: e)
            made[p.folder, default: []].append(p)
        }
        for p in others.values { made[p.folder, default: []].append(p) }
        byFolder = made
        return made[folder] ?? []
    }
}

/// A UUID written as the drive writes ids: 8-4-4-4-12 lower-case hex digits. Only that exact
/// form is taken (so that the string it stands for is one string, and an id that differs from
/// it in case or form is another id, as a string compare says).
struct UUIDBytes: Hashable, Sendable {
    let high: UInt64
    let low: UInt64

    init?(_ id: String) {
        var s = id
        s.makeContiguousUTF8()  // nothing to do for a native string
        guard let parsed = s.utf8.withContiguousStorageIfAvailable(Self.parse) ?? nil else { return nil }
        (high, low) = parsed
    }

    private static func parse(_ b: UnsafeBufferPointer<UInt8>) -> (UInt64, UInt64)? {
        guard b.count == 36 else { return nil }
        var high: UInt64 = 0, low: UInt64 = 0, digits = 0
        for (i, c) in b.enumerated() {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                guard c == UInt8(ascii: "-") else { return nil }
                continue
            }
            guard let v = Hex.value(c) else { return nil }
            if digits < 16 { high = high << 4 | UInt64(v) } else { low = low << 4 | UInt64(v) }
            digits += 1
        }
        return (high, low)
    }
}
