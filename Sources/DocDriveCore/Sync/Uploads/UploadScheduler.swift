// UploadScheduler: what goes into a store's upload queue, and when. A path noted as changed
// (through the mount, by a document mode, by the safety net of FileState) waits in memory for
// the store's write-back delay and goes into the durable queue with the next group commit; a
// folder made through the mount is queued only if it is still empty then. A part of the sync
// service (`SyncService`), whose workers take what the queue holds.
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

public final class UploadScheduler: Sendable {
    let stores: RunningStores
    let queue: UploadQueue
    let statusMarks: StatusMarks
    let logger: Logger
    /// A test's moments (nil in a drive).
    let probe: SyncProbe?

    /// Paths noted but not yet in the queue (root key, path, due): those waiting for the next
    /// commit, and the batches being written now (still shown as noted until the queue has
    /// them, so that `user.docdrive.status` never reads "synced" in between). Lock: leaf.
    let noted = Mutex(NotedPaths())
    /// Held across a commit of the noted paths, the committer thread's or the unmount's, so
    /// that the unmount's waits for one in flight (without it, the unmount could find nothing
    /// noted and count an empty queue before the committer's transaction had the last save).
    /// Lock order: outer of `noted` and `madeFolders`; never taken on a request thread.
    let committing = Mutex<Void>(())

    struct NotedPaths {
        var waiting: [(String, StorePath, Double)] = []
        var writing: [Int: [(String, StorePath, Double)]] = [:]
        var lastBatch = 0
    }
    /// Folders made through the mount, with when to look at them again (root key, path, due).
    /// A folder that still has nothing in it then is queued, so that an empty folder reaches
    /// the remote; one that has files is dropped: their uploads make it, and an entry of its
    /// own would only walk it again (and count in the queue) during a `cp -r` or `tar x`.
    /// In memory only: after a crash the comparison at mount finds empty folders. Lock: leaf.
    let madeFolders = Mutex<[(String, StorePath, Double)]>([])
    init(stores: RunningStores, queue: UploadQueue, statusMarks: StatusMarks, logger: Logger, probe: SyncProbe?) {
        self.stores = stores
        self.queue = queue
        self.statusMarks = statusMarks
        self.logger = logger
        self.probe = probe
    }

    func store(_ rootKey: String) -> StoreRuntime? { stores.store(rootKey) }

    /// A path changed (saved, deleted, renamed from or to): it will be made equal on the remote
    /// after the store's write-back delay. Cheap: the queue gets it with the next group commit.
    /// `madeFolder`: the path is a folder just made (see `madeFolders`).
    public func noteChanged(root rootKey: String, path: StorePath, madeFolder: Bool = false) {
        guard let store = store(rootKey), !path.isEmpty else { return }
        statusMarks.mark(root: rootKey, path: path)
        if madeFolder {
            let now = Date().timeIntervalSince1970
            store.lastChange.store(Int64(now * 1000), ordering: .relaxed)
            madeFolders.withLock { $0.append((rootKey, path, now + store.config.writebackDelay)) }
            return
        }
        let now = Date().timeIntervalSince1970
        let before = store.lastChange.exchange(Int64(now * 1000), ordering: .relaxed)
        if Double(before) / 1000 + store.config.writebackDelay < now {
            store.burstSize.store(1, ordering: .relaxed)
        } else {
            store.burstSize.add(1, ordering: .relaxed)
        }
        noted.withLock { $0.waiting.append((rootKey, path, now + store.config.writebackDelay)) }
    }

    /// The same for a path known as text (the document commands).
    public func noteChanged(root rootKey: String, path: String) {
        noteChanged(root: rootKey, path: StorePath(path))
    }

    /// Whether a path is noted but not yet queued (for user.docdrive.status).
    func isNoted(root: String, path: StorePath) -> Bool {
        noted.withLock { n in
            n.waiting.contains { $0.0 == root && $0.1 == path }
                || n.writing.values.contains { $0.contains { $0.0 == root && $0.1 == path } }
        }
            || madeFolders.withLock { $0.contains { $0.0 == root && $0.1 == path } }
    }

    /// Whether nothing is noted or waiting to be looked at (the uploader's `isIdle`).
    func isEmpty() -> Bool {
        noted.withLock({ $0.waiting.isEmpty && $0.writing.isEmpty }) && madeFolders.withLock({ $0.isEmpty })
    }

    /// Queues the folders made through the mount whose look is due and that are still empty.
    func commitMadeFolders() {
        let now = Date().timeIntervalSince1970
        let due = madeFolders.withLock { m -> [(String, StorePath, Double)] in
            guard m.contains(where: { $0.2 <= now }) else { return [] }
            let d = m.filter { $0.2 <= now }
            m.removeAll { $0.2 <= now }
            return d
        }
        guard !due.isEmpty else { return }
        let empty = due.filter { entry in
            guard let store = store(entry.0) else { return false }
            let cache = open(store.cache, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard cache >= 0 else { return false }
            defer { close(cache) }
            guard case .success(let fd) = Beneath.openFolder(cache, entry.1.names) else { return false }
            defer { close(fd) }
            return Beneath.names(fd)?.isEmpty ?? false
        }
        noted.withLock { $0.waiting.append(contentsOf: empty.map { ($0.0, $0.1, now) }) }
    }

    /// Writes the noted paths into the queue, in one transaction. Returns once every path
    /// noted before the call is in the queue, also when the committer thread's commit had taken
    /// them a moment before (`committing`).
    func commitNoted() {
        committing.withLock { _ in commitNotedNow() }
    }

    func commitNotedNow() {
        commitMadeFolders()
        let (number, batch) = noted.withLock { n -> (Int, [(String, StorePath, Double)]) in
            let b = n.waiting
            guard !b.isEmpty else { return (0, b) }
            n.waiting.removeAll(keepingCapacity: true)
            n.lastBatch += 1
            n.writing[n.lastBatch] = b
            return (n.lastBatch, b)
        }
        guard !batch.isEmpty else { return }
        probe?.willQueueNoted()
        do {
            try queue.enqueueAll(batch)
            noted.withLock { _ = $0.writing.removeValue(forKey: number) }
        } catch {
            logger.error("\(error.message)")
            noted.withLock { n in  // kept for the next try
                n.waiting.insert(contentsOf: batch, at: 0)
                n.writing.removeValue(forKey: number)
            }
        }
    }
}
