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
    private var uuids: [UUIDBytes: StorePath]
    private var others: [String: StorePath]
    /// The paths by their folder; nil until asked for after a listing.
    private var byFolder: [StorePath: [StorePath]]?

    public init(byID: [String: StorePath] = [:]) {
        uuids = Dictionary(minimumCapacity: byID.count)
        others = [:]
        for (id, listed) in byID {
            // A copy of the path: the listing's own is among its transient allocations.
            let path = StorePath(bytes: listed.bytes.withUnsafeBufferPointer { Array($0) })
            if let u = UUIDBytes(id) { uuids[u] = path } else { others[id] = path }
        }
        byFolder = nil
    }

    /// Where the item `id` was listed.
    public subscript(id: String) -> StorePath? {
        if let u = UUIDBytes(id) { return uuids[u] }
        return others[id]
    }

    /// The listed paths (with an id) directly in `folder`, in no particular order.
    public mutating func inFolder(_ folder: StorePath) -> [StorePath] {
        if let byFolder { return byFolder[folder] ?? [] }
        var made = [StorePath: [StorePath]]()
        for p in uuids.values { made[p.folder, default: []].append(p) }
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
