// S3HeadCache: the HEAD answers an S3 remote keeps, by key, so that a listing needs no HEAD for
// an object whose ETag and time it already knows.
import Synchronization

/// Memory: a store of 100,000 items keeps 100,000 answers. In the map each is a reference (8
/// bytes), not the answer itself (about 150 bytes inline): a Swift dictionary has up to twice as
/// many slots as entries, and holds the old and the new storage while it grows, so the answers
/// inline cost about 40 MB of slots and 60 MB at the last growth (heaptrack of a join: the
/// largest single peak consumer). The writing device's id and name, the same on most answers,
/// are kept once (one string each, shared by every answer that has them).
final class S3HeadCache: Sendable {
    final class Entry: Sendable {
        let head: S3Remote.Head
        init(_ head: S3Remote.Head) { self.head = head }
    }

    private struct State {
        var byKey = [[UInt8]: Entry]()
        /// Device ids and names seen, each kept once.
        var strings = Set<String>()
    }

    /// Lock: leaf.
    private let state = Mutex(State())
    /// Counts the changes (answers kept or forgotten): the answers are written to their file
    /// again only when it moved since the last write (`S3HeadCache+File.swift`).
    let changes = Atomic<Int>(0)
    /// `changes` when the answers were last written or read.
    let written = Atomic<Int>(0)
    /// Held while the answers are written to their file. Lock order: `writing`, then `state`.
    let writing = Mutex<Void>(())

    subscript(key: String) -> S3Remote.Head? {
        state.withLock { $0.byKey[Array(key.utf8)]?.head }
    }

    /// Keeps `head` for `key`; returns it as kept (the device's strings shared).
    @discardableResult
    func keep(_ head: S3Remote.Head, for key: String) -> S3Remote.Head {
        state.withLock { s in
            var h = head
            h.meta.shareDeviceStrings(in: &s.strings)
            s.byKey[Array(key.utf8)] = Entry(h)
            changes.add(1, ordering: .relaxed)
            return h
        }
    }

    func forget(_ key: String) {
        state.withLock { _ = $0.byKey.removeValue(forKey: Array(key.utf8)) }
        changes.add(1, ordering: .relaxed)
    }

    /// Every answer kept, with its key's bytes (references: the answers are not copied).
    func entries() -> [(key: [UInt8], entry: Entry)] {
        state.withLock { s in s.byKey.map { ($0.key, $0.value) } }
    }
}
