// Uploader: makes each store's remote hold what its local copy holds: paths noted as changed
// are queued (group-committed), and a pool of workers per store uploads, removes or walks them.
import CDocDriveSys
import Crypto
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The queue holds *paths whose remote state must be made equal to the local one*: a saved
/// file is uploaded, a deleted one removed, a renamed folder walked. So saves, deletes and
/// renames need no separate operations, and a crash loses nothing a re-walk cannot find.
public final class Uploader: Sendable {
    struct Store: Sendable {
        let config: StoreConfig
        let cache: String
        let remote: FolderRemote
    }

    /// The drive's coordinator: every upload reads its file inside a for-uploading intent.
    public let coordinator = Coordinator()
    private let stores: [String: Store]
    private let queue: UploadQueue
    private let logger: Logger
    private let workersPerStore: Int
    /// Paths noted but not yet in the queue (root key, path, due). Lock: leaf.
    private let noted = Mutex<[(String, String, Double)]>([])
    private let stopping = Atomic<Bool>(false)
    private let running = Atomic<Int>(0)
    /// Stores whose remote was unreachable at the last check. Lock: leaf.
    private let remotesDown = Mutex<Set<String>>([])
    /// Stores with a whole-store comparison scheduled. Lock: leaf.
    private let compareScheduled = Mutex<Set<String>>([])

    public init(home: DriveHome, config: DriveConfig, queue: UploadQueue, logger: Logger, workersPerStore: Int = 4) {
        var s = [String: Store]()
        let owner = SHA256.hash(data: Data(home.path.utf8)).prefix(6).map { String(format: "%02x", $0) }.joined()
        for store in config.stores {
            if case .folder(let path) = store.remote {
                s[store.rootKey] = Store(config: store, cache: home.cachePath(store.name), remote: FolderRemote(root: path, owner: owner))
            }
        }
        self.stores = s
        self.queue = queue
        self.logger = logger
        self.workersPerStore = workersPerStore
    }

    /// Whether files under this root key are uploaded (stores are; app containers are not).
    public func uploads(_ rootKey: String) -> Bool { stores[rootKey] != nil }

    /// A path changed (saved, deleted, renamed from or to): it will be made equal on the remote
    /// after the store's write-back delay. Cheap: the queue gets it with the next group commit.
    public func noteChanged(root rootKey: String, path: String) {
        guard let store = stores[rootKey], !path.isEmpty else { return }
        let due = Date().timeIntervalSince1970 + store.config.writebackDelay
        noted.withLock { $0.append((rootKey, path, due)) }
    }

    /// A file with several names was saved: its other names (unknown here) changed too. The
    /// whole store is compared with the remote after the write-back delay (hard links are rare).
    public func noteSavedWithOtherNames(root rootKey: String) {
        guard let store = stores[rootKey] else { return }
        guard compareScheduled.withLock({ s in s.insert(rootKey).inserted }) else { return }
        try? queue.enqueue(root: rootKey, path: Self.wholeStore, due: 0)
        let t = Thread { [self] in
            dd_background_thread()
            usleep(UInt32(min(store.config.writebackDelay, 60) * 1_000_000))
            compareScheduled.withLock { _ = $0.remove(rootKey) }
            if (try? store.remote.checkReachable()) != nil { reconcile(rootKey, store) }
        }
        t.start()
    }

    /// Whether a path is noted but not yet queued (for user.docdrive.status).
    func isNoted(root: String, path: String) -> Bool {
        noted.withLock { $0.contains { $0.0 == root && $0.1 == path } }
    }

    /// Writes the noted paths into the queue, in one transaction.
    func commitNoted() {
        let batch = noted.withLock { n -> [(String, String, Double)] in
            let b = n
            n.removeAll(keepingCapacity: true)
            return b
        }
        guard !batch.isEmpty else { return }
        do {
            try queue.enqueueAll(batch)
        } catch {
            logger.error("\(error.message)")
            noted.withLock { $0.insert(contentsOf: batch, at: 0) }  // keep them for the next try
        }
    }

    // MARK: workers

    /// Recovers what a crash interrupted, queues what differs from the remote, starts workers.
    public func start() {
        try? queue.recoverInterrupted()
        let committer = Thread { [self] in
            var tick = 0
            while !stopping.load(ordering: .relaxed) {
                usleep(50_000)
                commitNoted()
                tick += 1
                if tick % 5 == 0 { retryWhereRemotesCameBack() }
            }
        }
        committer.name = "docdrive-queue"
        committer.start()
        for (key, store) in stores {
            // An entry for the whole store stands in the queue until the local copy has been
            // compared with the remote, so `docdrive sync` waits for that too.
            try? queue.enqueue(root: key, path: Self.wholeStore, due: 0)
            if (try? store.remote.checkReachable()) != nil {
                // Before the mount serves anything: no file is open yet, so whatever differs
                // is a finished save (or one a crash interrupted).
                prepare(key, store)
                reconcile(key, store)
                startWorkers(key, store)
                continue
            }
            let t = Thread { [self] in
                dd_background_thread()
                logger.warning("store \(store.config.name): remote not reachable; uploads wait for it")
                while !stopping.load(ordering: .relaxed) && (try? store.remote.checkReachable()) == nil {
                    usleep(1_000_000)
                }
                if stopping.load(ordering: .relaxed) { return }
                prepare(key, store)
                startWorkers(key, store)
                reconcile(key, store)
            }
            t.name = "docdrive-reconcile"
            t.start()
        }
    }

    /// A remote that was unreachable and is back: what waits for its back-off goes now.
    private func retryWhereRemotesCameBack() {
        for (key, store) in stores {
            let up = (try? store.remote.checkReachable()) != nil
            let wasDown: Bool = remotesDown.withLock { down in
                if up { return down.remove(key) != nil }
                down.insert(key)
                return false
            }
            if up && wasDown {
                logger.info("store \(store.config.name): remote reachable again; retrying now")
                try? queue.makeAllDue(root: key)
            }
        }
    }

    /// The queue entry that stands for "compare the whole store" (never claimed by a worker).
    static let wholeStore = ""

    /// Clears the temporary files a crash left (no worker of ours is writing yet).
    private func prepare(_ key: String, _ store: Store) {
        let stale = store.remote.removeStaleUploads()
        if stale > 0 { logger.info("store \(store.config.name): removed \(stale) unfinished uploads left by a crash") }
    }

    private func startWorkers(_ key: String, _ store: Store) {
        for i in 0..<workersPerStore where !stopping.load(ordering: .relaxed) {
            let w = Thread { [self] in self.work(key, store) }
            w.name = "docdrive-upload-\(store.config.name)-\(i)"
            w.start()
        }
    }

    /// Stops taking new work after uploading what is queued, for at most `seconds`; returns
    /// how many entries are left waiting (they go on at the next mount).
    public func stop(drainFor seconds: Double) -> Int {
        commitNoted()
        try? queue.makeAllDue()
        // Wait while something is uploading or ready to go; an entry that failed again waits
        // for its back-off, which an unmount does not sit through.
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, ((try? queue.activeCount()) ?? 0) > 0 {
            usleep(50_000)
        }
        stopping.store(true, ordering: .relaxed)
        while running.load(ordering: .relaxed) > 0 { usleep(10_000) }
        commitNoted()
        try? queue.recoverInterrupted()
        let c = (try? queue.counts()) ?? [:]
        return (c[.pending] ?? 0) + (c[.failed] ?? 0)
    }

    private func work(_ key: String, _ store: Store) {
        dd_background_thread()  // uploads yield the CPU and the disk to what the user is doing
        running.add(1, ordering: .relaxed)
        defer { running.subtract(1, ordering: .relaxed) }
        while !stopping.load(ordering: .relaxed) {
            let job: UploadJob?
            do {
                job = try queue.claim(root: key)
            } catch {
                logger.error("\(error.message)")
                job = nil
            }
            guard let job else {
                usleep(100_000)
                continue
            }
            do {
                if try sync(job.path, store, key) == .removed {
                    try queue.completeRemoved(job)
                } else {
                    try queue.complete(job)
                }
            } catch let e as DriveError where e.code == .lockedForWriting {
                // Not a failure: try again a second later, without using up an attempt.
                logger.debug("upload of \(job.path) to \(store.config.name) waits: \(e.message)")
                try? queue.enqueue(root: key, path: job.path, due: Date().timeIntervalSince1970 + 1)
                try? queue.complete(job)
            } catch let e as DriveError where e.code == .changedDuringUpload {
                // Saved again while it was copied: the next save's entry takes over.
                try? queue.enqueue(root: key, path: job.path, due: Date().timeIntervalSince1970 + store.config.writebackDelay)
                try? queue.complete(job)
            } catch let e as DriveError {
                logger.warning("upload of \(job.path) to \(store.config.name) failed: \(e.message)")
                try? queue.fail(job, error: e.message)
            } catch {
                try? queue.fail(job, error: "\(error)")
            }
        }
    }

    enum Outcome { case uploaded, removed, walked }

    /// Makes the remote's `path` equal to the local one.
    private func sync(_ path: String, _ store: Store, _ key: String) throws -> Outcome {
        let local = store.cache + "/" + path
        var st = stat()
        if lstat(local, &st) != 0 {
            guard errno == ENOENT || errno == ENOTDIR else { throw DriveError.io("cannot read \(local)", .init(rawValue: errno)) }
            try store.remote.remove(path)  // deleted (or renamed away) locally
            return .removed
        }
        switch st.st_mode & S_IFMT {
        case S_IFREG:
            let fd = open(local, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else {
                if errno == ENOENT { try store.remote.remove(path); return .removed }
                throw DriveError.io("cannot read \(local)", .init(rawValue: errno))
            }
            defer { close(fd) }
            // A coordinated read: no process holds a write lock while the file is copied.
            do {
                try coordinator.coordinate([.init(fd: fd, .reading)], options: .forUploading, timeout: 2.0) {
                    _ = try store.remote.upload(from: fd, to: path)
                }
            } catch let e as DriveError where e.code == .busy {
                throw DriveError(.lockedForWriting, "\(path) is locked for writing")
            }
            return .uploaded
        case S_IFDIR:
            // A folder renamed, or created by a rename: queue what is in it, and what the remote
            // has there that the local copy no longer has.
            let now = Date().timeIntervalSince1970
            let localNames = Set((try? FileManager.default.contentsOfDirectory(atPath: local)) ?? [])
            var batch = localNames.map { (key, path + "/" + $0, now) }
            if let a = store.remote.attributes(path), !a.isDirectory { try store.remote.remove(path) }
            for name in store.remote.list(path) where !localNames.contains(name) {
                batch.append((key, path + "/" + name, now))
            }
            try queue.enqueueAll(batch)
            return .walked
        default:
            return .walked  // symlinks, fifos and devices are not uploaded
        }
    }

    /// At start: queue every local file whose size or time differs from the remote's, so a
    /// save that a crash kept out of the queue is still uploaded, and every path it uploaded
    /// before that is gone locally. Never removes what this drive did not put there.
    private func reconcile(_ key: String, _ store: Store) {
        var batch = [(String, String, Double)]()
        let now = Date().timeIntervalSince1970
        // Paths this drive put on the remote that are gone locally: a delete or rename that a
        // crash kept out of the queue. Only these are removed; nothing else on the remote is.
        for path in (try? queue.paths(root: key, state: .synced)) ?? [] {
            var st = stat()
            if lstat(store.cache + "/" + path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR) {
                batch.append((key, path, now))
            }
        }
        let base = URL(fileURLWithPath: store.cache)
        guard let e = FileManager.default.enumerator(at: base, includingPropertiesForKeys: [.isRegularFileKey, .isSymbolicLinkKey]) else { return }
        for case let url as URL in e {
            if stopping.load(ordering: .relaxed) { return }
            let full = url.path
            guard full.hasPrefix(store.cache + "/") else { continue }
            let rel = String(full.dropFirst(store.cache.count + 1))
            var st = stat()
            guard lstat(full, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { continue }
            if let r = store.remote.attributes(rel), !r.isDirectory, r.size == Int64(st.st_size),
               r.mtime.tv_sec == st.st_mtim.tv_sec, r.mtime.tv_nsec == st.st_mtim.tv_nsec { continue }
            batch.append((key, rel, now))
            if batch.count >= 1000 {
                try? queue.enqueueAll(batch)
                batch.removeAll()
            }
        }
        try? queue.enqueueAll(batch)
        try? queue.remove(root: key, path: Self.wholeStore)
        logger.info("store \(store.config.name): compared the local copy with the remote")
    }

    /// The user.docdrive.status of a store file.
    public func status(root: String, path: String) -> String {
        if isNoted(root: root, path: path) { return UploadState.pending.rawValue }
        guard let s = try? queue.state(root: root, path: path) else { return UploadState.synced.rawValue }
        return s.0.rawValue
    }
}
