// ProbedTable: the hash table under the node table's maps, in 8 or 16 bytes a bucket.

/// What a `ProbedTable` holds: an element that knows its own key's hash (the key is read from
/// the element, not stored beside it).
package protocol ProbedElement {
    var probeHash: UInt64 { get }
    /// How full the table may be, in eighths, before it grows: 6 (the default) for hashes
    /// spread at random; up to 7 where they seldom collide (ids handed out in order).
    static var fullAtEighths: Int { get }
}

extension ProbedElement {
    package static var fullAtEighths: Int { 6 }
}

/// A hash table of elements that carry their own keys: open addressing with linear probing
/// and backward-shift deletion (no tombstones), a power-of-two number of buckets, grown at
/// three quarters full (or as the elements say) and shrunk below one eighth.
///
/// Why not a Dictionary: the node table's maps had a bucket of key and value each (24 bytes
/// by id, 24 by backing file), when the node holds its own key; here a bucket is the element
/// only (a node reference, 8 bytes; with a lookup count, 16), and a map whose nodes the kernel
/// forgot gives its buckets back.
package struct ProbedTable<Element: ProbedElement> {
    private var buckets: ContiguousArray<Element?> = []
    package private(set) var count = 0
    /// Buckets looked at after a removal's hole, over the table's life (see `home`).
    package private(set) var shiftScans = 0

    package static var minimumCapacity: Int { 16 }

    package init() {}

    package var capacity: Int { buckets.count }
    private var mask: Int { buckets.count - 1 }
    /// 64 − log2(capacity): a hash's home is the top bits of its Fibonacci product.
    private var shift: UInt64 = 64

    /// Fibonacci hashing (the hash times 2^64/φ, its top bits): ids handed out in order land
    /// evenly apart instead of in one run of buckets. In one run, removing an element scanned
    /// the rest of the run (nothing in it could move back, and the scan ends only at an empty
    /// bucket): with the id itself as the home, every forget of 10,000 nodes remembered in
    /// order scanned thousands of buckets (17 % of the daemon's time in a cold `stat`).
    @inline(__always)
    private func home(_ hash: UInt64) -> Int { Int(truncatingIfNeeded: (hash &* 0x9E37_79B9_7F4A_7C15) >> shift) }

    /// The bucket of the element with this hash that `matches`, if any.
    @inline(__always)
    package func find(hash: UInt64, _ matches: (Element) -> Bool) -> Int? {
        guard count > 0 else { return nil }
        var i = home(hash)
        while let e = buckets[i] {
            if e.probeHash == hash, matches(e) { return i }
            i = (i + 1) & mask
        }
        return nil
    }

    package subscript(bucket i: Int) -> Element {
        get { buckets[i]! }
        set {
            precondition(newValue.probeHash == buckets[i]!.probeHash, "a bucket's element keeps its hash")
            buckets[i] = newValue
        }
    }

    /// Adds an element whose key is not in the table (the caller found none).
    package mutating func insertNew(_ e: Element) {
        if (count + 1) * 8 > capacity * Element.fullAtEighths { resize(to: max(Self.minimumCapacity, capacity * 2)) }
        var i = home(e.probeHash)
        while buckets[i] != nil { i = (i + 1) & mask }
        buckets[i] = e
        count += 1
    }

    /// Removes the element in bucket `i` and returns it.
    @discardableResult
    package mutating func remove(bucket i: Int) -> Element {
        let removed = buckets[i]!
        buckets[i] = nil
        count -= 1
        // Backward shift: an element after the hole moves into it unless its home lies in
        // (hole, j] (cyclically), where it would no longer be found from its home.
        var hole = i
        var j = i
        while true {
            j = (j + 1) & mask
            guard let e = buckets[j] else { break }
            shiftScans += 1
            if (j - home(e.probeHash)) & mask >= (j - hole) & mask {
                buckets[hole] = e
                buckets[j] = nil
                hole = j
            }
        }
        if capacity > Self.minimumCapacity, count * 8 < capacity { resize(to: capacity / 2) }
        return removed
    }

    package mutating func removeAll() {
        buckets = []
        count = 0
        shift = 64
    }

    /// Every element, in no particular order.
    package var elements: LazyMapSequence<LazyFilterSequence<ContiguousArray<Element?>>, Element> {
        buckets.lazy.filter { $0 != nil }.map { $0! }
    }

    private mutating func resize(to n: Int) {
        let old = buckets
        buckets = ContiguousArray(repeating: nil, count: n)
        shift = UInt64(64 - n.trailingZeroBitCount)
        for case let e? in old {
            var i = home(e.probeHash)
            while buckets[i] != nil { i = (i + 1) & mask }
            buckets[i] = e
        }
    }
}

extension ProbedTable: Sendable where Element: Sendable {}

/// How the node table spreads backing files over its parts, and within a part over the
/// buckets of its tables by identity.
package enum NodeSpread {
    /// A backing file's hash in the tables by identity. The views of one file share it (a
    /// drive meets few views). Not mixed here: a `ProbedTable` places a hash by the top bits
    /// of its Fibonacci product.
    @inline(__always)
    package static func hash(dev: UInt64, ino: UInt64) -> UInt64 { ino &+ dev &* 0xBF58_476D_1CE4_E5B9 }

    /// A backing file's part (of `1 << bits`): the low bits of the hash mixed (SplitMix64's
    /// finalizer), which say nothing of the top bits of its Fibonacci product. (The first
    /// version took the top bits of that same product: every file of a part then had the same
    /// top bits, so a part's tables placed all of them in 1/64 of their buckets, and a walk of
    /// 100,000 files took 1.3–1.6 s where it had taken 0.9–1.0.)
    @inline(__always)
    package static func part(dev: UInt64, ino: UInt64, bits: UInt64) -> Int {
        var z = hash(dev: dev, ino: ino)
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        return Int(truncatingIfNeeded: z & ((1 << bits) - 1))
    }
}
