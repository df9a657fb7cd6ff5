// StoreRuntime: one store as the sync runs it (its config, remote, two-way sync, bandwidth
// limit and burst counters), and RunningStores, the stores running now, by root key.
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A store as the sync runs it. Replaced (and the old one stopped) when its config
/// changes; stopped when it leaves the config.
final class StoreRuntime: Sendable {
    let config: StoreConfig
    let cache: String
    /// Its remote (the sync's).
    var remote: EngineRemote { sync.remote }
    /// The two-way sync of this store with its remote.
    let sync: StoreSync
    let limit: BandwidthLimit?
    /// Set when the store left the config or was replaced: its workers finish their file and end.
    let stopped = Atomic<Bool>(false)
    /// When a path of the store last changed (a save, a removal, a rename), in milliseconds
    /// since the epoch: a burst of changes holds the uploads back (see `holdUntil`).
    let lastChange = Atomic<Int64>(0)
    /// Changes in the burst that `lastChange` ends (each within a write-back delay of the
    /// one before): a bulk burst (`bulkBurst` or more) that ended goes up at once.
    let burstSize = Atomic<Int>(0)
    /// Runs the readahead's bookkeeping (a folder's scan included) off the request
    /// threads, one thing at a time.
    let readaheadWork: DispatchQueue
    /// How many placeholders of the store download at once: twice its upload workers (8
    /// by default), as rclone's checkers (8) are twice its transfers (4). A download is
    /// waited for by a program; an upload is not.
    var downloadSlots: Int { 2 * config.workers }

    init(config: StoreConfig, cache: String, sync: StoreSync, limit: BandwidthLimit?) {
        self.config = config
        self.cache = cache
        self.sync = sync
        self.limit = limit
        self.readaheadWork = DispatchQueue(label: "docdrive-readahead-\(config.name)")
    }
}

/// The stores running now, by root key; read on every save, twice, and changed only when the
/// config changes. So they are kept in several copies, each under its own lock: a thread reads
/// the copy its thread id picks (with one lock, the saves of 8 parallel writers waited for
/// each other there), and a change (under the uploader's `configSeen`, or at init) writes every
/// copy, one after the other. A thread always reads the same copy, so it never sees a store
/// come back after it saw it go. Lock: leaf (one copy at a time).
final class RunningStores: Sendable {
    final class Copy: Sendable {
        let stores = Mutex<[String: StoreRuntime]>([:])
    }
    private let copies: [Copy] = (0..<16).map { _ in Copy() }
    /// The copy this thread reads.
    private var here: Copy {
        copies[Int((UInt64(pthread_self()) &* 0x9E37_79B9_7F4A_7C15) >> 60)]
    }

    /// The running store of `rootKey`, nil when none runs.
    func store(_ rootKey: String) -> StoreRuntime? { here.stores.withLock { $0[rootKey] } }

    /// Every running store.
    func all() -> [String: StoreRuntime] { here.stores.withLock { $0 } }

    /// The stores as the last change made them (the first copy), for the next change.
    func current() -> [String: StoreRuntime] { copies[0].stores.withLock { $0 } }

    /// Makes every copy `s`.
    func set(_ s: [String: StoreRuntime]) {
        for c in copies { c.stores.withLock { $0 = s } }
    }
}
