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
    /// A store as the uploader runs it. Replaced (and the old one stopped) when its config
    /// changes; stopped when it leaves the config.
    final class Store: Sendable {
        let config: StoreConfig
        let cache: String
        let remote: any Remote
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

        init(config: StoreConfig, cache: String, remote: any Remote, sync: StoreSync, limit: BandwidthLimit?) {
            self.config = config
            self.cache = cache
            self.remote = remote
            self.sync = sync
            self.limit = limit
            self.readaheadWork = DispatchQueue(label: "docdrive-readahead-\(config.name)")
        }
    }

    /// The drive's coordinator: every upload reads its file inside a for-uploading intent.
    public let coordinator = Coordinator()
    /// How busy the mount is (its FUSE adapter tells): a burst's uploads go once it is idle.
    public let activity = MountActivity()
    private let home: DriveHome
    /// The running stores by root key; read on every save, twice, and changed only when the
    /// config changes. So it is kept in several copies, each under its own lock: a thread reads
    /// the copy its thread id picks (with one lock, the saves of 8 parallel writers waited for
    /// each other there), and a change (under `configSeen`, or at init) writes every copy, one
    /// after the other. A thread always reads the same copy, so it never sees a store come
    /// back after it saw it go. Lock: leaf (one copy at a time).
    private final class StoresCopy: Sendable {
        let stores = Mutex<[String: Store]>([:])
    }
    private let storesCopies: [StoresCopy] = (0..<16).map { _ in StoresCopy() }
    /// The copy this thread reads.
    private var storesHere: StoresCopy {
        storesCopies[Int((UInt64(pthread_self()) &* 0x9E37_79B9_7F4A_7C15) >> 60)]
    }
    /// Makes every copy `s`.
    private func setStores(_ s: [String: Store]) {
        for c in storesCopies { c.stores.withLock { $0 = s } }
    }
    /// The config file's mtime the store list was last built from. Lock: serializes reloads
    /// (held while stores start or stop; never taken under another lock).
    private let configSeen = Mutex<timespec>(timespec())
    private let owner: String
    private let queue: UploadQueue
    let logger: Logger
    /// The index's last write failure, published for `docdrive status`.
    private let indexWriteError: @Sendable () -> String?
    /// Paths noted but not yet in the queue (root key, path, due): those waiting for the next
    /// commit, and the batches being written now (still shown as noted until the queue has
    /// them, so that `user.docdrive.status` never reads "synced" in between). Lock: leaf.
    private let noted = Mutex(NotedPaths())
    /// Held across a commit of the noted paths, the committer thread's or the unmount's, so
    /// that the unmount's waits for one in flight (without it, the unmount could find nothing
    /// noted and count an empty queue before the committer's transaction had the last save).
    /// Lock order: outer of `noted` and `madeFolders`; never taken on a request thread.
    private let committing = Mutex<Void>(())

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
    private let madeFolders = Mutex<[(String, StorePath, Double)]>([])
    /// Files that `unrecorded` found and queued, with when. Lock: leaf.
    private let rechecked = Mutex<[RecheckKey: Double]>([:])
    private struct RecheckKey: Hashable {
        let root: String
        let path: StorePath
    }
    private static let recheckInterval: Double = 30
    private let stopping = Atomic<Bool>(false)
    /// Stores held offline because a fault killed the daemon while it worked on them
    /// (CrashGuard: their states are written there), by root key. Lock: leaf.
    private let held = Mutex<[String: Store]>([:])
    /// Set at unmount: what is queued goes now, burst or not.
    private let draining = Atomic<Bool>(false)
    private let running = Atomic<Int>(0)
    /// Queue entries whose job ended (any way), for `docdrive sync`'s look at what a round did.
    private let jobsEnded = Atomic<Int>(0)
    /// Stores whose remote was unreachable at the last check. Lock: leaf.
    private let remotesDown = Mutex<Set<String>>([])
    /// Stores with a whole-store comparison scheduled. Lock: leaf.
    private let compareScheduled = Mutex<Set<String>>([])
    /// Files being copied, by upload number, with their progress. Lock: leaf.
    private let inFlight = Mutex<[String: InFlightUpload]>([:])
    /// Placeholders asked for or being filled now, with who waits for each: one download per
    /// file, however many opens wait for it, a few per store at once (Downloads.swift).
    let downloads = Downloads()
    /// Filled placeholders keep showing their ctime (FilledTimes.swift).
    public let filledTimes = FilledTimes()
    /// Which local files are open through the mount (the sync engine asks before it changes one).
    private let localFiles: any LocalFiles
    /// Where the sync engine publishes what it changed in the local copies.
    public let changes: RemoteChanges
    /// A test's moments (nil in a drive).
    private let probe: SyncProbe?
    private let index: ItemIndex
    private let device: DeviceIdentity
    /// The last activity written to run/uploads.json (only the committer thread writes it).
    /// Lock: leaf.
    private let published = Mutex<UploadActivity?>(nil)
    /// Paths whose state may have changed, for the desktop status socket (FileStatusService).
    public let statusMarks = StatusMarks()

    public init(home: DriveHome, config: DriveConfig, index: ItemIndex, logger: Logger,
                localFiles: any LocalFiles, changes: RemoteChanges, probe: SyncProbe? = nil,
                indexWriteError: @escaping @Sendable () -> String? = { nil }) {
        self.home = home
        self.localFiles = localFiles
        self.changes = changes
        self.probe = probe
        self.index = index
        let queue = index.uploads
        self.device = (try? home.device()) ?? DeviceIdentity.make()
        // Upload temps on the remote carry this device's id: another device on the same remote
        // (even one whose drive home has the same path) never takes them for its own leftovers.
        self.owner = (try? home.device().tag) ?? Hex.encode(SHA256.hash(data: Data(home.path.utf8)).prefix(6))
        self.queue = queue
        self.logger = logger
        self.indexWriteError = indexWriteError
        var s = [String: Store]()
        for store in config.stores { if let r = makeStore(store) { s[store.rootKey] = r } }
        setStores(s)
        configSeen.withLock { $0 = Self.mtime(home.configPath) }
    }

    private func makeStore(_ config: StoreConfig) -> Store? {
        let remote: any Remote
        switch config.remote {
        case .folder(let path):
            remote = FolderRemote(root: path, owner: owner)
        case .s3(let settings):
            do {
                let s3 = try S3Remote(settings: settings, device: owner, answersFile: home.storePath(config.name) + "/s3-answers")
                do {
                    if let n = try s3.loadKeptAnswers() { logger.info("store \(config.name): \(n) objects' metadata kept from the last run") }
                } catch {
                    logger.warning("store \(config.name): \(error.message)")
                }
                remote = s3
            } catch {
                logger.error("store \(config.name): \(error.message)")
                return nil
            }
        }
        let limit = config.bandwidth.map { BandwidthLimit(bytesPerSecond: $0) }
        let storeName = config.name
        let sync = StoreSync(key: config.rootKey, name: config.name, cache: home.cachePath(config.name),
                             downloads: home.storePath(config.name) + "/downloads", remote: remote, device: device,
                             index: index, coordinator: coordinator, logger: logger, limit: limit, content: config.content, cacheLimit: config.cacheLimit,
                             localFiles: localFiles, changes: changes, probe: probe,
                             progress: { [unowned self] path, done, total, direction in
                                 inFlight.withLock {
                                     $0[storeName + "/" + path.description] = InFlightUpload(store: storeName, path: path.description, done: done, total: total,
                                                                                             direction: direction)
                                 }
                             },
                             progressDone: { [unowned self] path in _ = inFlight.withLock { $0.removeValue(forKey: storeName + "/" + path.description) } },
                             statusMarks: statusMarks)
        return Store(config: config, cache: home.cachePath(config.name), remote: remote, sync: sync, limit: limit)
    }

    func store(_ rootKey: String) -> Store? { storesHere.stores.withLock { $0[rootKey] } }

    func allStores() -> [String: Store] { storesHere.stores.withLock { $0 } }

    /// Whether files under this root key are uploaded (stores are; app containers are not).
    public func uploads(_ rootKey: String) -> Bool { store(rootKey) != nil }

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

    /// Something changed in the store at a path the caller cannot name (a path longer than the
    /// kernel gives back for a descriptor): the whole store is compared, as below.
    public func noteChangedSomewhere(root rootKey: String) {
        noteSavedWithOtherNames(root: rootKey)
    }

    /// A file with several names was saved: its other names (unknown here) changed too. The
    /// whole store is compared with the remote after the write-back delay (hard links are rare).
    public func noteSavedWithOtherNames(root rootKey: String) {
        guard let store = store(rootKey) else { return }
        guard compareScheduled.withLock({ s in s.insert(rootKey).inserted }) else { return }
        try? queue.enqueue(root: rootKey, path: Self.wholeStore, due: 0)
        let t = Thread { [self] in
            dd_background_thread()
            usleep(UInt32(min(store.config.writebackDelay, 60) * 1_000_000))
            compareScheduled.withLock { _ = $0.remove(rootKey) }
            if !store.stopped.load(ordering: .relaxed), (try? store.remote.checkReachable()) != nil { reconcile(rootKey, store) }
        }
        t.start()
    }

    /// Whether a path is noted but not yet queued (for user.docdrive.status).
    func isNoted(root: String, path: StorePath) -> Bool {
        noted.withLock { n in
            n.waiting.contains { $0.0 == root && $0.1 == path }
                || n.writing.values.contains { $0.contains { $0.0 == root && $0.1 == path } }
        }
            || madeFolders.withLock { $0.contains { $0.0 == root && $0.1 == path } }
    }

    /// Queues the folders made through the mount whose look is due and that are still empty.
    private func commitMadeFolders() {
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

    private func commitNotedNow() {
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
                if tick % 5 == 0 {
                    retryWhereRemotesCameBack()
                    publishActivity()
                }
                if tick % 10 == 0 { reloadIfConfigChanged() }
                if tick % 20 == 0 { startHeldStores() }
            }
        }
        committer.name = "docdrive-queue"
        committer.start()
        let crashed = CrashGuard.held(home)
        for (key, store) in allStores() {
            if let why = crashed[store.config.name] {
                hold(key, store, why)
                continue
            }
            // Before the mount serves anything: no file is open yet, so whatever differs is a
            // finished save (or one a crash interrupted).
            startStore(key, store, inBackground: false)
        }
    }

    /// Keeps `store` offline with the reason `why`: nothing of it starts (no comparison, no
    /// poll, no upload), its local copy is served as it is and its changes wait in the queue.
    private func hold(_ key: String, _ store: Store, _ why: String) {
        let now = Date().timeIntervalSince1970
        store.sync.state.withLock { $0.offlineSince = now; $0.offlineReason = why }
        held.withLock { $0[key] = store }
        logger.error("store \(store.config.name): \(why).")
    }

    /// Starts the held stores whose marker is gone (`docdrive store retry`).
    private func startHeldStores() {
        let retried = held.withLock { h -> [(String, Store)] in
            guard !h.isEmpty else { return [] }
            let still = CrashGuard.held(home)
            let gone = h.filter { still[$0.value.config.name] == nil }
            for (key, _) in gone { h[key] = nil }
            return gone.map { ($0.key, $0.value) }
        }
        for (key, store) in retried where !store.stopped.load(ordering: .relaxed) {
            store.sync.state.withLock { $0.offlineSince = nil; $0.offlineReason = nil }
            logger.info("store \(store.config.name): tried again (docdrive store retry)")
            startStore(key, store, inBackground: true)
        }
    }

    /// Queues the whole-store comparison, then compares and starts the workers: at once when
    /// the remote is reachable (and `inBackground` is false), else on a thread that waits for it.
    /// The calling thread works for the store meanwhile (CrashGuard).
    private func startStore(_ key: String, _ store: Store, inBackground: Bool) {
        CrashGuard.working(for: store.config.name) { startStoreNow(key, store, inBackground: inBackground) }
    }

    private func startStoreNow(_ key: String, _ store: Store, inBackground: Bool) {
        // An entry for the whole store stands in the queue until the local copy has been
        // compared with the remote, so `docdrive sync` waits for that too.
        try? queue.enqueue(root: key, path: Self.wholeStore, due: 0)
        if !inBackground, (try? store.remote.checkReachable()) != nil {
            prepare(key, store)
            // A store just joined (placeholders made from the first step of the first poll)
            // mounts without waiting for the rest of that poll (S3: a HEAD per object), which
            // the poller does before it polls again; so does a store whose first poll has more
            // than `lookupsAMountWaitsFor` items to look up (S3 after a restart: the HEAD
            // answers are kept in memory only, so every object is looked up again). Every
            // other store mounts compared.
            guard let first = startReconcile(key, store, placingEarly: true) else { return startWorkers(key, store) }
            if first.placedEarly { return startWorkers(key, store, finishing: first) }
            if first.lookups > Self.lookupsAMountWaitsFor {
                logger.info("store \(store.config.name): mounting before \(first.lookups) items' metadata is read (a request each); the comparison with the remote goes on in the background (docdrive sync waits for it)")
                return startWorkers(key, store, finishing: first)
            }
            finishReconcile(key, store, first)
            startWorkers(key, store)
            return
        }
        let t = Thread { [self] in
            dd_background_thread()
            CrashGuard.working(for: store.config.name)
            var warned = false
            while !stopping.load(ordering: .relaxed) && !store.stopped.load(ordering: .relaxed)
                    && (try? store.remote.checkReachable()) == nil {
                if !warned { logger.warning("store \(store.config.name): remote not reachable; uploads wait for it") }
                warned = true
                usleep(1_000_000)
            }
            if stopping.load(ordering: .relaxed) || store.stopped.load(ordering: .relaxed) { return }
            prepare(key, store)
            startWorkers(key, store)
            reconcile(key, store)
        }
        t.name = "docdrive-reconcile"
        t.start()
    }

    private static func mtime(_ path: String) -> timespec {
        var st = stat()
        return lstat(path, &st) == 0 ? st.st_mtim : timespec()
    }

    /// Picks up stores added to or removed from config.yaml while mounted (cheap when the
    /// file did not change: one stat). A config that does not parse changes nothing.
    func reloadIfConfigChanged() {
        let m = Self.mtime(home.configPath)
        let changed = configSeen.withLock { seen -> Bool in
            m.tv_sec != seen.tv_sec || m.tv_nsec != seen.tv_nsec
        }
        guard changed else { return }
        guard let config = try? home.loadConfig() else { return }
        apply(config, mtime: m)
    }

    /// Makes the running stores those of `config`: new ones start like at mount (comparison,
    /// workers), removed ones stop (their files not yet uploaded are forgotten), changed ones
    /// restart with their new settings.
    func apply(_ config: DriveConfig, mtime: timespec) {
        configSeen.withLock { seen in
            guard mtime.tv_sec != seen.tv_sec || mtime.tv_nsec != seen.tv_nsec else { return }
            seen = mtime
            let wanted = Dictionary(config.stores.map { ($0.rootKey, $0) }, uniquingKeysWith: { a, _ in a })
            var started = [(String, Store, Bool)](), ended = [(String, Store, Bool)]()
            var s = storesCopies[0].stores.withLock { $0 }
            do {
                for (key, old) in s where wanted[key] != old.config {
                    s[key] = nil
                    ended.append((key, old, wanted[key] == nil))
                }
                for (key, c) in wanted where s[key] == nil {
                    guard let r = makeStore(c) else { continue }
                    s[key] = r
                    let previous = ended.first { $0.0 == key }?.1
                    started.append((key, r, previous == nil || previous?.config.remote != c.remote))
                }
            }
            setStores(s)
            for (key, old, removed) in ended {
                old.stopped.store(true, ordering: .relaxed)
                queue.work.signal()
                if removed {
                    try? queue.forgetWaiting(root: key)
                    logger.info("store \(old.config.name): removed from the config; its uploads stop")
                }
            }
            for (key, r, isNew) in started {
                if isNew {
                    logger.info("store \(r.config.name): added to the config; comparing it with its remote")
                    startStore(key, r, inBackground: true)
                } else {
                    logger.info("store \(r.config.name): settings changed; restarting its workers")
                    startWorkers(key, r)
                }
            }
        }
    }

    /// A remote that was unreachable and is back: what waits for its back-off goes now.
    private func retryWhereRemotesCameBack() {
        for (key, store) in allStores() {
            let up = (try? store.remote.checkReachable()) != nil
            let wasDown: Bool = remotesDown.withLock { down in
                if up { return down.remove(key) != nil }
                down.insert(key)
                return false
            }
            if up && wasDown {
                logger.info("store \(store.config.name): remote reachable again; retrying now")
                _ = try? queue.makeDue(.all, root: key)
            }
        }
    }

    /// The most lookups (S3: HEADs, 16 at once) the first poll of a store that is not new makes
    /// before the mount is ready: about a second on a remote 30 ms away. A restarted device with
    /// 100,000 objects waited 44-55 s for them, and was stopped, not ready, after 60 s under load.
    static let lookupsAMountWaitsFor = 500

    /// The queue entry that stands for "compare the whole store" (never claimed by a worker).
    static let wholeStore = StorePath.store

    /// Clears the temporary files a crash left (no worker of ours is writing yet).
    private func prepare(_ key: String, _ store: Store) {
        store.sync.removeStaleDownloads()
        store.sync.recentlyDeleted.sweep(force: true)
        let stale = store.remote.removeStaleUploads()
        if stale > 0 { logger.info("store \(store.config.name): removed \(stale) unfinished uploads left by a crash") }
    }

    /// `finishing`: the first poll, begun (`startReconcile`), which the poller finishes first.
    private func startWorkers(_ key: String, _ store: Store, finishing first: StoreSync.PollStart? = nil) {
        let n = store.config.workers
        logger.info("store \(store.config.name): \(n) upload worker\(n == 1 ? "" : "s")\(store.limit.map { ", at most \($0.bytesPerSecond) bytes/s" } ?? "")")
        for i in 0..<n where !stopping.load(ordering: .relaxed) {
            let w = Thread { [self] in
                Sys.nameThisThread("up-\(i)-\(store.config.name)")
                CrashGuard.working(for: store.config.name)
                self.work(key, store)
            }
            w.name = "docdrive-upload-\(store.config.name)-\(i)"
            w.start()
        }
        if !stopping.load(ordering: .relaxed) { startPoller(key, store, finishing: first) }
    }

    /// Stops taking new work after uploading what is queued, for at most `seconds`; returns
    /// how many entries are left waiting (they go on at the next mount).
    public func stop(drainFor seconds: Double) -> Int {
        draining.store(true, ordering: .relaxed)
        commitNoted()
        _ = try? queue.makeDue(.all)
        // Wait while something is uploading, ready to go, or put back for a moment (a busy
        // path, `activeCount`); an entry that failed again waits for its back-off, which an
        // unmount does not sit through.
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, ((try? queue.activeCount()) ?? 0) > 0 {
            usleep(50_000)
        }
        stopping.store(true, ordering: .relaxed)
        queue.work.signal()
        while running.load(ordering: .relaxed) > 0 { usleep(10_000) }
        for store in allStores().values {
            store.remote.finishCleanup()
            store.sync.fills.commitNow()
        }
        commitNoted()
        try? queue.recoverInterrupted()
        home.removeActivity()
        let c = (try? queue.counts()) ?? [:]
        return (c[.pending] ?? 0) + (c[.failed] ?? 0)
    }

    /// Entries a worker claims at once: their queue updates, their bases and the flushes of the
    /// remote folders they go into are shared (`UploadBatch`: a burst of small files costs two
    /// transactions and a folder fsync per batch, not per file), while the other workers take
    /// the next ones.
    static let batchSize = 16

    private func work(_ key: String, _ store: Store) {
        dd_background_thread()  // uploads yield the CPU and the disk to what the user is doing
        running.add(1, ordering: .relaxed)
        defer { running.subtract(1, ordering: .relaxed) }
        while !stopping.load(ordering: .relaxed) && !store.stopped.load(ordering: .relaxed) {
            let ticket = queue.workTicket()
            let now = Date().timeIntervalSince1970
            let hold = holdUntil(store, now: now)
            let jobs: [UploadJob]
            do {
                // During a burst only entries held back for as long as they may be are taken.
                // A bulk burst that ended (a `cp -r` of many files, the drive idle since) goes
                // at once: each of its files is one the burst wrote, not a document an editor
                // saves again and again, which keeps its write-back delay.
                let due = hold != nil ? now - Self.longestHold(store)
                    : endedBulkBurst(store, now: now) ? now + store.config.writebackDelay : now
                jobs = try queue.claim(root: key, limit: Self.batchSize, sharedBy: store.config.workers, dueBy: due, now: now)
            } catch {
                logger.error("\(error.message)")
                jobs = []
            }
            guard !jobs.isEmpty else {
                if hold != nil {
                    // Sleep through the burst, without the database: until the store has been
                    // quiet for its delay, or until the oldest entry has waited as long as it may.
                    let oldest = (try? queue.nextDue(root: key)) ?? nil
                    sleepThroughBurst(store, until: (oldest ?? .infinity) + Self.longestHold(store))
                    continue
                }
                // Nothing due: sleep until something is queued or the next entry is due (a
                // failed entry's back-off, a save's write-back delay), at most 5 s.
                queue.waitForWork(root: key, after: ticket, cap: 5)
                continue
            }
            var endings = [(UploadJob, UploadQueue.Ending)]()
            endings.reserveCapacity(jobs.count)
            let batch = UploadBatch()
            for job in jobs {
                if stopping.load(ordering: .relaxed) || store.stopped.load(ordering: .relaxed) {
                    endings.append((job, .unstarted))
                    continue
                }
                endings.append((job, upload(job, store, key, batch)))
            }
            // The batch's small files: durable on the remote, then recorded, before their
            // entries end (nothing is shown as uploaded that a crash could take back).
            store.sync.commit(batch)
            if !batch.failures.isEmpty {
                for i in endings.indices {
                    if let why = batch.failures[endings[i].0.path] { endings[i].1 = .failed(why) }
                }
            }
            do {
                try queue.finish(endings)
            } catch {
                logger.error("\(error.message)")
            }
            jobsEnded.add(endings.count, ordering: .relaxed)
        }
    }

    // MARK: bursts

    /// While a store's files keep changing (tar x, cp -r, git checkout, a build), its uploads
    /// wait until the burst is over, as Syncthing's change aggregation does: the write-back delay
    /// runs from the store's last change rather than from each file's own save. A burst does not
    /// compete with the work that makes it for the CPU and the disk, and what it changes again or
    /// deletes before it ends (build output, an extracted tree removed again) is never uploaded.
    /// A burst is also over once nothing at all has been asked of the mount, and no file has been
    /// open for writing through it, for a quarter of the delay (0.5 s by default; 0.2 s after
    /// a bulk burst, `idleEnds`): whoever made
    /// it is done and nobody is at work on the drive, so a `cp -r` that ended is uploaded without
    /// waiting out the whole delay, while work that goes on reading or listing (an `ls -lR`, a
    /// build between two writes) still holds it. Each file still waits its own write-back delay
    /// after its last save (its entry's due time), so repeated saves of a document still become
    /// one upload. Nil when nothing holds the uploads back; otherwise when the hold would end if
    /// nothing happened meanwhile.
    private func holdUntil(_ store: Store, now: Double) -> Double? {
        guard !draining.load(ordering: .relaxed) else { return nil }
        let changed = Double(store.lastChange.load(ordering: .relaxed)) / 1000
        let quietAt = changed + store.config.writebackDelay
        guard now < quietAt else { return nil }
        guard let idle = activity.idleSince else { return quietAt }
        let idleAt = max(idle, changed) + Self.idleEnds(store)
        return now < idleAt ? min(idleAt, quietAt) : nil
    }

    /// How long the drive must be idle for a burst to be over: a quarter of the write-back
    /// delay (0.5 s by default); for a bulk burst (`bulkBurst` changes or more: a `cp -r`, a
    /// `tar x`, which ask something of the mount every few microseconds) 0.2 s, if shorter.
    static func idleEnds(_ store: Store) -> Double {
        let quarter = store.config.writebackDelay / 4
        return store.burstSize.load(ordering: .relaxed) >= bulkBurst ? min(0.2, quarter) : quarter
    }

    /// Changes that make a burst a bulk one (see `endedBulkBurst`).
    static let bulkBurst = 64

    /// Whether the store's last burst had `bulkBurst` changes or more and ended because the
    /// drive went idle (its write-back delay since its last change has not passed yet).
    private func endedBulkBurst(_ store: Store, now: Double) -> Bool {
        let changed = Double(store.lastChange.load(ordering: .relaxed)) / 1000
        return now < changed + store.config.writebackDelay && store.burstSize.load(ordering: .relaxed) >= Self.bulkBurst
    }

    /// How long past its due time a burst may hold an entry back: ten write-back delays (20 s
    /// by default), so a store that never stops changing still uploads, a little behind.
    static func longestHold(_ store: Store) -> Double { 10 * store.config.writebackDelay }

    /// Sleeps while a burst holds `store`'s uploads back: until it has been quiet for its
    /// write-back delay (or the drive idle, see `holdUntil`), until `limit`, or until the
    /// uploader stops or drains. Polls a clock and
    /// an atomic every 20 ms at most; the queue's signals, which every save sends, do not wake it.
    private func sleepThroughBurst(_ store: Store, until limit: Double) {
        while !stopping.load(ordering: .relaxed) && !store.stopped.load(ordering: .relaxed) {
            let now = Date().timeIntervalSince1970
            guard let hold = holdUntil(store, now: now) else { return }
            let wake = min(hold, limit)
            if now >= wake { return }
            usleep(UInt32(min(wake - now, 0.02) * 1_000_000) + 1)
        }
    }

    /// Makes the remote and the local copy agree on one job's path (SyncDecision decides which
    /// way); says how it ended.
    private func upload(_ job: UploadJob, _ store: Store, _ key: String, _ batch: UploadBatch) -> UploadQueue.Ending {
        do throws(DriveError) {
            switch try store.sync.sync(job.path, batch: batch) {
            case .removed: return .removed
            case .synced: return .synced
            case .busy: return .again(due: Date().timeIntervalSince1970 + 0.3)
            }
        } catch where error.code == .lockedForWriting {
            // Not a failure: try again a second later, without using up an attempt.
            logger.debug("upload of \(job.path) to \(store.config.name) waits: \(error.message)")
            return .again(due: Date().timeIntervalSince1970 + 1)
        } catch where error.code == .changedDuringUpload || error.code == .remoteChanged {
            // Saved again while it was copied (the next save's entry takes over), or another
            // device keeps writing it: decided again a little later.
            return .again(due: Date().timeIntervalSince1970 + store.config.writebackDelay)
        } catch {
            logger.warning("sync of \(job.path) with \(store.config.name) failed: \(error.message)")
            return .failed(error.message)
        }
    }

    static func kindPhrase(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFIFO: return "a named pipe (fifo)"
        case S_IFSOCK: return "a socket"
        case S_IFCHR, S_IFBLK: return "a device"
        default: return "neither a file, a folder nor a link"
        }
    }

    /// At start (and when a file with several names was saved): queues every local path that
    /// differs from what this device and the remote last agreed on, then looks at the remote.
    /// Nothing is removed on either side here: each queued path is decided on its own.
    private func reconcile(_ key: String, _ store: Store) {
        guard let start = startReconcile(key, store, placingEarly: false) else { return }
        finishReconcile(key, store, start)
    }

    /// `reconcile` up to the first step of its poll (StoreSync.startPoll); nil when stopping.
    private func startReconcile(_ key: String, _ store: Store, placingEarly: Bool) -> StoreSync.PollStart? {
        store.sync.compareLocal { stopping.load(ordering: .relaxed) || store.stopped.load(ordering: .relaxed) }
        // What failed before goes again now (its remote may be back, its file gone).
        _ = try? queue.makeDue(.all, root: key)
        if stopping.load(ordering: .relaxed) || store.stopped.load(ordering: .relaxed) { return nil }
        return store.sync.startPoll(placingEarly: placingEarly)
    }

    private func finishReconcile(_ key: String, _ store: Store, _ start: StoreSync.PollStart) {
        store.sync.finishPoll(start)
        trimMalloc()
        try? queue.remove(root: key, path: Self.wholeStore)
        logger.info("store \(store.config.name): compared the local copy with the remote")
    }

    /// Looks at the remote every `poll` seconds (at once when `docdrive sync` asks) for what
    /// other devices changed; less often when a look takes long (`nextPoll`).
    private func startPoller(_ key: String, _ store: Store, finishing first: StoreSync.PollStart?) {
        let t = Thread { [self] in
            dd_background_thread()
            Sys.nameThisThread("poll-\(store.config.name)")
            CrashGuard.working(for: store.config.name)
            if let first { finishReconcile(key, store, first) }
            var due = Self.nextPoll(began: Date().timeIntervalSince1970, took: 0, every: store.config.poll)
            while !stopping.load(ordering: .relaxed) && !store.stopped.load(ordering: .relaxed) {
                usleep(50_000)
                let now = Date().timeIntervalSince1970
                let wanted = store.sync.pollWanted.exchange(false, ordering: .relaxed)
                guard wanted || now >= due else { continue }
                store.sync.poll()
                due = Self.nextPoll(began: now, took: Date().timeIntervalSince1970 - now, every: store.config.poll)
                // After a poll of a large store most of what it held is free (now that
                // `finishPoll` returned), much of it in pages glibc keeps: they go back, so that
                // the daemon's resident memory stays near what it uses (README, joining).
                trimMalloc()
                store.sync.clearResolvedConflicts()
            }
        }
        t.name = "docdrive-poll-\(store.config.name)"
        t.start()
    }

    /// When the poller looks at the remote again after a look that began at `began` and took
    /// `took` seconds: `every` seconds after it began; after a look of more than a second, not
    /// before ten times its length, so that looking takes at most a tenth of the time. (A folder
    /// remote of 100,000 items is walked with a `stat` and a `getxattr` each, and S3 lists 1,000
    /// keys a request: such a store, polled every 10 s, kept a CPU 63 % busy while nothing
    /// changed.) Short looks keep `every`, however small. `docdrive sync` does not wait.
    public static func nextPoll(began: Double, took: Double, every: Double) -> Double {
        began + max(every, took > 1 ? took * 10 : 0)
    }

    /// Asks every store to look at its remote now; returns the poll counts to wait past.
    public func pollNow() -> [String: Int] {
        var out = [String: Int]()
        for (key, store) in allStores() {
            out[key] = store.sync.pollsStarted.load(ordering: .relaxed)
            store.sync.pollWanted.store(true, ordering: .relaxed)
        }
        return out
    }

    /// How many polls of the store `root` ended at the remote's fingerprint, nothing having
    /// changed since a poll that found nothing to do (`StoreSync.startPoll`).
    package func quietPolls(root: String) -> Int {
        store(root)?.sync.quietPolls.load(ordering: .relaxed) ?? 0
    }

    /// At most this many polls in a row end at the fingerprint.
    package static var quietPollsInARow: Int { StoreSync.quietPollsInARow }

    /// Whether every store finished a poll that started after `marks` were taken (polls run
    /// one at a time per store, so the polls done then exceed the polls started at the mark).
    public func polledSince(_ marks: [String: Int]) -> Bool {
        allStores().allSatisfy { key, store in
            store.sync.polls.load(ordering: .relaxed) >= (marks[key] ?? 0) + 1
        }
    }

    /// Per store: last poll, offline state, devices seen on the remote.
    public func remoteStates() -> [String: RemoteState] {
        Dictionary(uniqueKeysWithValues: allStores().values.map { ($0.config.name, $0.sync.state.withLock { $0 }) })
    }

    /// `docdrive sync`, before it reports failed files: each goes again now. A remote that
    /// fails only some of the requests never looks down, so the retry when it comes back
    /// (`retryWhereRemotesCameBack`) does not happen, and a file's last try may have failed
    /// just before the remote recovered.
    public func retryFailedNow() {
        do {
            let n = try queue.makeDue(.failed)
            if n > 0 { logger.info("\(n) failed file\(n == 1 ? "" : "s") retried now (docdrive sync)") }
        } catch {
            logger.error("\(error.message)")
        }
    }

    /// `docdrive sync`, first: every store's local copy is compared with what this device and
    /// the remote last agreed on (the bases), and each path that differs with nothing waiting
    /// for it is queued, and logged. So a sync that ends well means every local file is on the
    /// remote, also one that a missed note or a change behind the mount's back left out.
    /// Returns how many paths were queued.
    @discardableResult
    public func compareWithRecords() -> Int {
        var total = 0
        for (key, store) in allStores() {
            var found = [StorePath]()
            let n = store.sync.compareLocal(unexpected: { [self] p in
                guard !isNoted(root: key, path: p), (try? queue.state(root: key, path: p))?.0 ?? .synced == .synced else { return false }
                if found.count < 5 { found.append(p) }
                return true
            }) { stopping.load(ordering: .relaxed) || store.stopped.load(ordering: .relaxed) }
            if n > 0 {
                logger.warning("store \(store.config.name): \(n) path\(n == 1 ? "" : "s") differed from this device's record of the remote with nothing waiting, now queued (docdrive sync): \(found.map(\.description).joined(separator: ", "))\(n > found.count ? ", ..." : "")")
            }
            total += n
        }
        return total
    }

    /// `docdrive sync`'s look at the remotes: every store polls now; answers once each poll is
    /// done (`polled`), or after `timeout` seconds (0.5 to 120).
    public func pollAndWait(timeout: Double) -> (stores: [String: RemoteState], polled: Bool) {
        let marks = pollNow()
        let deadline = Date().addingTimeInterval(min(120, max(0.5, timeout)))
        while !polledSince(marks) && Date() < deadline { usleep(20_000) }
        let polled = polledSince(marks)
        // What was downloaded is on the disk when the sync returns (FillCommits.swift).
        for store in allStores().values { store.sync.fills.commitNow() }
        return (remoteStates(), polled)
    }

    /// What `isIdle(since:)` compares with: the number of jobs ended so far.
    public func workMark() -> Int { jobsEnded.load(ordering: .relaxed) }

    /// Whether no job ended since `mark` and nothing waits: nothing queued (failed entries
    /// aside), noted or made. `docdrive sync` ends after a round whose polls found nothing and
    /// that was idle so (a poll that queued paths leaves them waiting, or their jobs ended).
    public func isIdle(since mark: Int) -> Bool {
        guard jobsEnded.load(ordering: .relaxed) == mark,
              noted.withLock({ $0.waiting.isEmpty && $0.writing.isEmpty }),
              madeFolders.withLock({ $0.isEmpty }) else { return false }
        return (try? queue.waitingCount()) == 0
    }

    /// Rewrites run/uploads.json when what it says changed (called every 250 ms), so that
    /// `docdrive status` can show progress; an idle daemon leaves it unchanged.
    func publishActivity() {
        let now = inFlight.withLock { Array($0.values) }.sorted { ($0.store, $0.path) < ($1.store, $1.path) }
        let time = Date().timeIntervalSince1970
        let settings = allStores().values.map {
            StoreActivity(name: $0.config.name, workers: $0.config.workers, bandwidth: $0.config.bandwidth,
                          held: holdUntil($0, now: time) != nil, remote: $0.sync.state.withLock { $0 })
        }.sorted { $0.name < $1.name }
        let a = UploadActivity(pid: getpid(), stores: settings, uploads: now, indexWriteError: lastIndexWriteError())
        let fresh = published.withLock { last -> Bool in
            if last == a { return false }
            last = a
            return true
        }
        if fresh { home.writeActivity(a) }
    }

    /// The last failed write to the index or the upload queue, until a write works again.
    /// Asked through the control socket too: run/uploads.json cannot be rewritten on a full disk.
    public func lastIndexWriteError() -> String? { indexWriteError() ?? queue.writeError }

    /// The files being uploaded now, with their progress.
    public func uploadsInFlight() -> [InFlightUpload] { inFlight.withLock { Array($0.values) } }

    /// The state of the store `root` as a whole (FileState.ofStore).
    public func storeState(root: String) -> FileState {
        let c = (try? queue.counts(root: root)) ?? [:]
        return FileState.ofStore(waiting: (c[.pending] ?? 0) + (c[.uploading] ?? 0))
    }

    /// The state of a store file (FileState.ofStoreFile); `isFile`: the path is a regular file
    /// here; `isPlaceholder` tells whether its content is not here.
    public func fileState(root: String, path: StorePath, isFile: Bool, isPlaceholder: () -> Bool) -> FileState {
        FileState.ofStoreFile(filling: isFilling(root: root, path: path),
                              inConflict: index.bases.inConflict(root: root, path: path.description),
                              noted: isNoted(root: root, path: path),
                              queued: (try? queue.state(root: root, path: path))?.0,
                              unrecorded: { isFile && unrecorded(root: root, path: path) },
                              isPlaceholder: { isFile && isPlaceholder() })
    }

    /// Whether the file at `path` has nothing waiting and no record of being on the remote
    /// (no base): then it is not synced, whatever left it so, and it is looked at again (at
    /// most every `recheckInterval` per path). A safety net: "synced" is never said of a file
    /// the remote may not have.
    private func unrecorded(root: String, path: StorePath) -> Bool {
        guard store(root) != nil else { return false }
        do {
            guard try index.bases.base(root: root, path: path) == nil else { return false }
        } catch {
            return false  // the index cannot tell: no claim either way
        }
        let now = Date().timeIntervalSince1970
        let due = rechecked.withLock { m -> Bool in
            if m.count >= 4096 { m = m.filter { now - $0.value < Self.recheckInterval } }
            guard now - (m[RecheckKey(root: root, path: path)] ?? 0) >= Self.recheckInterval else { return false }
            m[RecheckKey(root: root, path: path)] = now
            return true
        }
        if due {
            logger.warning("store \(store(root)?.config.name ?? root): \(path) had nothing waiting and no record of being on the remote; it is looked at again.")
            noteChanged(root: root, path: path)
        }
        return true
    }
}
