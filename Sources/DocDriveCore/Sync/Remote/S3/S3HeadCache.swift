// S3HeadCache: the HEAD answers an S3 remote keeps, by key, so that a listing needs no HEAD for
// an object whose ETag and time it already knows.
import Synchronization

/// Memory: a store of 100,000 items keeps 100,000 answers, each packed with its key into one
/// allocation (`Answer`), found from a table of 8-byte buckets. The writing device's id and name,
/// the same on most answers, are kept once and named by a number.
package final class S3HeadCache: Sendable {
    private struct State {
        var answers = ProbedTable<Kept>()
        var shared = SharedStrings()

        func bucket(of key: UnsafeBufferPointer<UInt8>, hash: UInt64) -> Int? {
            answers.find(hash: hash) { $0.answer.keyEquals(key) }
        }
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

    package init() {}

    package var count: Int { state.withLock { $0.answers.count } }

    package subscript(key: String) -> S3Remote.Head? {
        Self.withBytes(key) { k, hash in
            state.withLock { s in
                s.bucket(of: k, hash: hash).map { i in
                    s.answers[bucket: i].answer.withPacked { HeadPacking.unpack($0, shared: s.shared.all) }
                }
            }
        }
    }

    /// The answer kept for `key` if its ETag is `etag` (then the answer's ETag is that string).
    package func answer(for key: String, etag: String) -> S3Remote.Head? {
        Self.withBytes(key) { k, hash in
            state.withLock { s in
                guard let i = s.bucket(of: k, hash: hash) else { return nil }
                return s.answers[bucket: i].answer.withPacked { b in
                    HeadPacking.hasETag(b, etag) ? HeadPacking.unpack(b, shared: s.shared.all, etag: etag) : nil
                }
            }
        }
    }

    /// Keeps `head` for `key`; returns it as kept (its device strings the ones kept).
    @discardableResult
    package func keep(_ head: S3Remote.Head, for key: String) -> S3Remote.Head {
        Self.withBytes(key) { k, hash in
            state.withLock { s in
                let packed = HeadPacking.pack(head, shared: &s.shared)
                let kept = Kept(answer: .make(key: k, packed: packed, hash: hash))
                if let i = s.bucket(of: k, hash: hash) { s.answers[bucket: i] = kept } else { s.answers.insertNew(kept) }
                changes.add(1, ordering: .relaxed)
                var h = head
                h.meta.shareDeviceStrings(in: &s.shared)
                return h
            }
        }
    }

    package func forget(_ key: String) {
        Self.withBytes(key) { k, hash in
            state.withLock { s in
                if let i = s.bucket(of: k, hash: hash) { s.answers.remove(bucket: i) }
            }
        }
        changes.add(1, ordering: .relaxed)
    }

    /// Every answer kept (references: nothing is copied), and the strings they were packed with.
    func snapshot() -> (answers: [Answer], shared: [String]) {
        state.withLock { s in (s.answers.elements.map(\.answer), s.shared.all) }
    }

    private static func withBytes<R>(_ key: String, _ body: (UnsafeBufferPointer<UInt8>, UInt64) -> R) -> R {
        var key = key
        key.makeContiguousUTF8()
        return key.utf8.withContiguousStorageIfAvailable { body($0, hash($0)) }!
    }
}
