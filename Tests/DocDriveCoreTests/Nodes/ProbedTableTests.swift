// ProbedTableTests: the open-addressing table under the node table's maps (Nodes/ProbedTable.swift).
import DocDriveCore
import Foundation
import XCTest

/// A key and a value, whose hash is its key divided by `spread`: with a spread above 1 many
/// keys share a hash, so that runs of probes form, wrap around the end and are shifted back.
private protocol KeyValue: ProbedElement {
    init(key: UInt64, value: UInt64, spread: UInt64)
    var key: UInt64 { get }
    var value: UInt64 { get set }
}

private struct Pair: KeyValue {
    let key: UInt64
    var value: UInt64
    let spread: UInt64
    var probeHash: UInt64 { key / spread }
}

/// The same, in a table that grows only at seven eighths full.
private struct FullerPair: KeyValue {
    let key: UInt64
    var value: UInt64
    let spread: UInt64
    var probeHash: UInt64 { key / spread }
    static var fullAtEighths: Int { 7 }
}

/// A backing file as the node table's tables by identity hold it.
private struct File: ProbedElement {
    let dev: UInt64
    let ino: UInt64
    var probeHash: UInt64 { NodeSpread.hash(dev: dev, ino: ino) }
}

final class ProbedTableTests: XCTestCase {
    /// The node table's parts each hold a table by identity: the files of one part must spread
    /// over its buckets as all files would. The first choice of part (the top bits of the same
    /// Fibonacci product the table places by) crowded each part's files into 1/64 of its
    /// buckets: 3,124 removals scanned 4,721,954 buckets (they shift whole runs back).
    func testTheFilesOfOnePartSpreadOverItsTable() {
        let bits: UInt64 = 6
        var sizes = [Int](repeating: 0, count: 1 << bits)
        var table = ProbedTable<File>()
        var inPart = [File]()
        for ino in UInt64(12)..<200_012 {  // inode numbers as a file system hands them out
            let f = File(dev: 2049, ino: ino)
            let part = NodeSpread.part(dev: f.dev, ino: f.ino, bits: bits)
            sizes[part] += 1
            if part == 0 {
                table.insertNew(f)
                inPart.append(f)
            }
        }
        let even = 200_000 / sizes.count
        XCTAssertGreaterThan(sizes.min()!, even * 9 / 10, "parts: \(sizes)")
        XCTAssertLessThan(sizes.max()!, even * 11 / 10, "parts: \(sizes)")
        for f in inPart {
            guard let b = table.find(hash: f.probeHash, { $0.ino == f.ino }) else { return XCTFail("\(f.ino) not found") }
            table.remove(bucket: b)
        }
        XCTAssertLessThanOrEqual(table.shiftScans, 4 * inPart.count,
                                 "\(inPart.count) removals scanned \(table.shiftScans) buckets")
    }

    private func find<P: KeyValue>(_ t: ProbedTable<P>, _ key: UInt64, spread: UInt64) -> P? {
        t.find(hash: key / spread) { $0.key == key }.map { t[bucket: $0] }
    }

    /// Random inserts, changes and removals agree with a Dictionary after every step: every key
    /// present is found with its value, keys removed or never added are not, and the table
    /// stays at most as full as its elements allow and gives its buckets back as it empties.
    func testTheTableHoldsExactlyWhatADictionaryHoldsThroughRandomChanges() {
        let seed = UInt64(ProcessInfo.processInfo.environment["DOCDRIVE_PROBED_SEED"] ?? "") ?? UInt64.random(in: 0..<1_000_000)
        print("probed table seed \(seed) (replay with DOCDRIVE_PROBED_SEED=\(seed))")
        var rng = SplitMix64(seed: seed)
        exercise(Pair.self, seed: seed, &rng)
        exercise(FullerPair.self, seed: seed, &rng)
    }

    private func exercise<P: KeyValue>(_: P.Type, seed: UInt64, _ rng: inout SplitMix64) {
        for spread: UInt64 in [1, 7, 64] {
            var t = ProbedTable<P>()
            var d = [UInt64: UInt64]()
            // Keys from a small range, so that removed keys come back and hashes collide.
            let keyRange: UInt64 = 1_000
            for step in 0..<6_000 {
                // Grow during the first half, empty during the second.
                let growing = step < 3_000
                let key = rng.next() % keyRange
                let roll = rng.next() % 10
                if let b = t.find(hash: key / spread, { $0.key == key }) {
                    if roll < (growing ? 3 : 8) {
                        XCTAssertEqual(t.remove(bucket: b).key, key, "seed \(seed): removed another element")
                        d[key] = nil
                    } else {
                        t[bucket: b].value = step.magnitude.asUInt64
                        d[key] = step.magnitude.asUInt64
                    }
                } else if growing || roll < 2 {
                    t.insertNew(P(key: key, value: step.magnitude.asUInt64, spread: spread))
                    d[key] = step.magnitude.asUInt64
                }
                if t.count != d.count || t.count * 8 > t.capacity * P.fullAtEighths {
                    return XCTFail("seed \(seed), spread \(spread), step \(step): \(t.count) elements (\(d.count) expected) in \(t.capacity) buckets")
                }
                if step % 97 == 0 || step > 5_950 {
                    let wrong = (0..<keyRange).filter { find(t, $0, spread: spread)?.value != d[$0] }
                    XCTAssertEqual(wrong, [], "seed \(seed), spread \(spread), step \(step): keys found wrong")
                    if !wrong.isEmpty { return }
                    XCTAssertEqual(Dictionary(uniqueKeysWithValues: t.elements.map { ($0.key, $0.value) }), d, "seed \(seed): the elements")
                }
            }
            // Empty it: it shrinks back to a few buckets, and what is left is still found.
            for k in d.keys.sorted().dropLast(3) {
                let b = t.find(hash: k / spread) { $0.key == k }
                XCTAssertNotNil(b, "seed \(seed): key \(k) lost while emptying")
                if let b { t.remove(bucket: b) }
                d[k] = nil
            }
            XCTAssertEqual(t.count, d.count)
            XCTAssertLessThanOrEqual(t.capacity, 64, "seed \(seed): an emptied table kept \(t.capacity) buckets")
            for (k, v) in d { XCTAssertEqual(find(t, k, spread: spread)?.value, v, "seed \(seed): key \(k) after emptying") }
        }
    }
}

extension ProbedTableTests {
    private struct ID: ProbedElement {
        let id: UInt64
        var probeHash: UInt64 { id }
        static var fullAtEighths: Int { 7 }
    }

    /// Ids handed out in order and removed in order (the kernel forgetting a walk) keep the
    /// removals short: with the id itself as an element's home, 50,000 such ids lay in one run
    /// of buckets, and each removal scanned the rest of the run (over a billion buckets).
    func testIdsInOrderAreRemovedWithoutScanningTheTable() {
        var t = ProbedTable<ID>()
        let n: UInt64 = 50_000
        for id in 1_000_000..<(1_000_000 + n) { t.insertNew(ID(id: id)) }
        for id in 1_000_000..<(1_000_000 + n) {
            guard let b = t.find(hash: id, { $0.id == id }) else { return XCTFail("id \(id) not found") }
            t.remove(bucket: b)
        }
        XCTAssertEqual(t.count, 0)
        XCTAssertLessThan(t.shiftScans, 20 * Int(n), "removals scanned \(t.shiftScans) buckets for \(n) ids")
    }
}

private extension UInt {
    var asUInt64: UInt64 { UInt64(self) }
}
