// SyncService: the drive's sync, one runtime per store (StoreRuntime). It makes the stores'
// runtimes from the config and stops them, runs each store's pool of workers (which upload,
// remove or walk what the queue holds) and its poller, holds a store a crash stopped, and answers
// what `docdrive status` asks. Its parts: the UploadScheduler (what goes into the queue, and
// when) and FilesOnDemand (placeholders' downloads, pins, evictions, pictures).
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
public final class SyncService: Sendable {
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
    /// Stores whose remote a sync found unreachable, until a check finds it back
    /// (`retryWhereRemotesCameBack`); only these, and stores whose poll failed, are checked.
    /// Lock: leaf.
    let remotesDown = Mutex<Set<String>>([])
    /// Stores with a whole-store comparison scheduled. Lock: leaf.
    let compareScheduled = Mutex<Set<String>>([])
    /// Files being copied, by upload number, with their progress. Lock: leaf.
    let inFlight = Mutex<[String: InFlightUpload]>([:])
    /// Content on demand: placeholders' downloads, readahead, pins, evictions, pictures.
    public let onDemand: FilesOnDemand
    /// What goes into the queue, and when: the paths noted as changed, group-committed.
    public let scheduler: UploadScheduler
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
        self.scheduler = UploadScheduler(stores: stores, queue: index.uploads, statusMarks: statusMarks, logger: logger, probe: probe)
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
                             statusMarks: statusMarks, reconcile: config.reconcile)
        return StoreRuntime(config: config, cache: home.cachePath(config.name), sync: sync, limit: limit)
    }

    func store(_ rootKey: String) -> StoreRuntime? { stores.store(rootKey) }

    func allStores() -> [String: StoreRuntime] { stores.all() }

    /// Whether files under this root key are uploaded (stores are; app containers are not).
    public func uploads(_ rootKey: String) -> Bool { store(rootKey) != nil }

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
}
