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
    /// The drive's coordinator: every upload reads its file inside a for-uploading intent.
    public let coordinator = Coordinator()
    /// How busy the mount is (its FUSE adapter tells): a burst's uploads go once it is idle.
    public let activity = MountActivity()
    let home: DriveHome
    /// The stores running now (RunningStores).
    let stores: RunningStores
    /// The config file's mtime the store list was last built from. Lock: serializes reloads
    /// (held while stores start or stop; never taken under another lock).
    let configSeen = Mutex<timespec>(timespec())
    let owner: String
    let queue: UploadQueue
    let logger: Logger
    /// The index's last write failure, published for `docdrive status`.
    let indexWriteError: @Sendable () -> String?
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
    /// Files that `unrecorded` found and queued, with when. Lock: leaf.
    let rechecked = Mutex<[RecheckKey: Double]>([:])
    struct RecheckKey: Hashable {
        let root: String
        let path: StorePath
    }
    static let recheckInterval: Double = 30
    let stopping = Atomic<Bool>(false)
    /// Stores held offline because a fault killed the daemon while it worked on them
    /// (CrashGuard: their states are written there), by root key. Lock: leaf.
    let held = Mutex<[String: StoreRuntime]>([:])
    /// Set at unmount: what is queued goes now, burst or not.
    let draining = Atomic<Bool>(false)
    let running = Atomic<Int>(0)
    /// Queue entries whose job ended (any way), for `docdrive sync`'s look at what a round did.
    let jobsEnded = Atomic<Int>(0)
    /// Stores whose remote was unreachable at the last check. Lock: leaf.
    let remotesDown = Mutex<Set<String>>([])
    /// Stores with a whole-store comparison scheduled. Lock: leaf.
    let compareScheduled = Mutex<Set<String>>([])
    /// Files being copied, by upload number, with their progress. Lock: leaf.
    let inFlight = Mutex<[String: InFlightUpload]>([:])
    /// Content on demand: placeholders' downloads, readahead, pins, evictions, pictures.
    public let onDemand: FilesOnDemand
    /// The drive's watch of config.yaml, asked at the ticks of the queue's thread.
    let configWatch: ConfigWatch
    /// Which local files are open through the mount (the sync engine asks before it changes one).
    let localFiles: any LocalFiles
    /// Where the sync engine publishes what it changed in the local copies.
    public let changes: DriveChanges
    /// A test's moments (nil in a drive).
    let probe: SyncProbe?
    let index: ItemIndex
    let device: DeviceIdentity
    /// Paths whose state may have changed, for the desktop status socket (FileStatusService).
    public let statusMarks: StatusMarks
    /// What `docdrive status` shows changed (`status-watch`): the queue's writes, transfers'
    /// progress, remotes going offline or online, marked paths.
    public var statusChanges: StatusChanges { statusMarks.changes }

    public init(home: DriveHome, config: DriveConfig, index: ItemIndex, logger: Logger,
                configWatch: ConfigWatch, localFiles: any LocalFiles, changes: DriveChanges, probe: SyncProbe? = nil,
                indexWriteError: @escaping @Sendable () -> String? = { nil }) {
        let stores = RunningStores(), statusMarks = StatusMarks(changes: index.uploads.statusChanges)
        self.stores = stores
        self.statusMarks = statusMarks
        self.onDemand = FilesOnDemand(stores: stores, statusMarks: statusMarks, logger: logger)
        self.home = home
        self.configWatch = configWatch
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
        var s = [String: StoreRuntime]()
        for store in config.stores { if let r = makeStore(store) { s[store.rootKey] = r } }
        stores.set(s)
        configSeen.withLock { $0 = Self.mtime(home.configPath) }
    }

    func makeStore(_ config: StoreConfig) -> StoreRuntime? {
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
                                 statusChanges.changed()
                             },
                             progressDone: { [unowned self] path in
                                 _ = inFlight.withLock { $0.removeValue(forKey: storeName + "/" + path.description) }
                                 statusChanges.changed()
                             },
                             statusMarks: statusMarks)
        return StoreRuntime(config: config, cache: home.cachePath(config.name), remote: remote, sync: sync, limit: limit)
    }

    func store(_ rootKey: String) -> StoreRuntime? { stores.store(rootKey) }

    func allStores() -> [String: StoreRuntime] { stores.all() }

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
