// SyncService+Workers: each store's life in the daemon: started (or held offline), its workers taking
// the queue, the config reloaded (stores added and removed), stopped with a grace time.
import CDocDriveSys
import Crypto
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

extension SyncService {
    // MARK: workers

    /// Recovers what a crash interrupted, queues what differs from the remote, starts workers.
    public func start() {
        try? queue.recoverInterrupted()
        let committer = Thread { [self] in
            var tick = 0
            while !stopping.load(ordering: .relaxed) {
                usleep(50_000)
                scheduler.commitNoted()
                tick += 1
                if tick % 5 == 0 { retryWhereRemotesCameBack() }
                if tick % 10 == 0 { configWatch.check() }
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
    func hold(_ key: String, _ store: StoreRuntime, _ why: String) {
        let now = Date().timeIntervalSince1970
        store.sync.status.held(at: now, why)
        held.withLock { $0[key] = store }
        statusChanges.changed()
        logger.error("store \(store.config.name): \(why).")
    }

    /// Starts the held stores whose marker is gone (`docdrive store retry`).
    func startHeldStores() {
        let retried = held.withLock { h -> [(String, StoreRuntime)] in
            guard !h.isEmpty else { return [] }
            let still = CrashGuard.held(home)
            let gone = h.filter { still[$0.value.config.name] == nil }
            for (key, _) in gone { h[key] = nil }
            return gone.map { ($0.key, $0.value) }
        }
        for (key, store) in retried where !store.stopped.load(ordering: .relaxed) {
            store.sync.status.retried()
            statusChanges.changed()
            logger.info("store \(store.config.name): tried again (docdrive store retry)")
            startStore(key, store, inBackground: true)
        }
    }

    /// Queues the whole-store comparison, then compares and starts the workers: at once when
    /// the remote is reachable (and `inBackground` is false), else on a thread that waits for it.
    /// The calling thread works for the store meanwhile (CrashGuard).
    func startStore(_ key: String, _ store: StoreRuntime, inBackground: Bool) {
        CrashGuard.working(for: store.config.name) { startStoreNow(key, store, inBackground: inBackground) }
    }

    func startStoreNow(_ key: String, _ store: StoreRuntime, inBackground: Bool) {
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

    static func mtime(_ path: String) -> timespec {
        var st = stat()
        return lstat(path, &st) == 0 ? st.st_mtim : timespec()
    }

    /// Makes the running stores those of `config`: new ones start like at mount (comparison,
    /// workers), removed ones stop (their files not yet uploaded are forgotten), changed ones
    /// restart with their new settings.
    func apply(_ config: DriveConfig, mtime: timespec) {
        configSeen.withLock { seen in
            guard mtime.tv_sec != seen.tv_sec || mtime.tv_nsec != seen.tv_nsec else { return }
            seen = mtime
            let wanted = Dictionary(config.stores.map { ($0.rootKey, $0) }, uniquingKeysWith: { a, _ in a })
            var started = [(String, StoreRuntime, Bool)](), ended = [(String, StoreRuntime, Bool)]()
            var s = stores.current()
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
            stores.set(s)
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

    /// A remote that was unreachable and is back: what waits for its back-off goes now. Only a
    /// remote that failed is asked (a sync found it unreachable, or its last poll failed): an
    /// idle store costs no request here (S3: a HEAD of the marker four times a second was 95 %
    /// of an idle store's requests).
    func retryWhereRemotesCameBack() {
        for (key, store) in allStores() {
            let failed = remotesDown.withLock { $0.contains(key) } || store.sync.status.remote.offlineSince != nil
            guard failed else { continue }
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
    func prepare(_ key: String, _ store: StoreRuntime) {
        store.sync.removeStaleDownloads()
        store.sync.recentlyDeleted.sweep(force: true)
        let stale = store.remote.removeStaleUploads()
        if stale > 0 { logger.info("store \(store.config.name): removed \(stale) unfinished uploads left by a crash") }
    }

    /// `finishing`: the first poll, begun (`startReconcile`), which the poller finishes first.
    func startWorkers(_ key: String, _ store: StoreRuntime, finishing first: StoreSync.PollStart? = nil) {
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
        scheduler.commitNoted()
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
        scheduler.commitNoted()
        try? queue.recoverInterrupted()
        let c = (try? queue.counts()) ?? [:]
        return (c[.pending] ?? 0) + (c[.failed] ?? 0)
    }

    /// Entries a worker claims at once: their queue updates, their bases and the flushes of the
    /// remote folders they go into are shared (`UploadBatch`: a burst of small files costs two
    /// transactions and a folder fsync per batch, not per file), while the other workers take
    /// the next ones.
    static let batchSize = 16

    func work(_ key: String, _ store: StoreRuntime) {
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
            // The other devices are told of the batch's writes once (S3: the change mark).
            store.sync.remote.announce()
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
}

extension SyncService: DriveChangeSubscriber {
    public var follows: DriveChangeKinds { .config }

    /// Stores added to or removed from config.yaml while mounted (ConfigWatch).
    public func changed(_ change: DriveChange) {
        if case let .config(config, mtime) = change { apply(config, mtime: mtime) }
    }
}
