// SyncService+Bursts: when uploads start (after a burst of changes is over), one upload, and the
// poller and reconcile that look at the remote.
import CDocDriveSys
import Crypto
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

extension SyncService {
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
    func holdUntil(_ store: StoreRuntime, now: Double) -> Double? {
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
    static func idleEnds(_ store: StoreRuntime) -> Double {
        let quarter = store.config.writebackDelay / 4
        return store.burstSize.load(ordering: .relaxed) >= bulkBurst ? min(0.2, quarter) : quarter
    }

    /// Changes that make a burst a bulk one (see `endedBulkBurst`).
    static let bulkBurst = 64

    /// Whether the store's last burst had `bulkBurst` changes or more and ended because the
    /// drive went idle (its write-back delay since its last change has not passed yet).
    func endedBulkBurst(_ store: StoreRuntime, now: Double) -> Bool {
        let changed = Double(store.lastChange.load(ordering: .relaxed)) / 1000
        return now < changed + store.config.writebackDelay && store.burstSize.load(ordering: .relaxed) >= Self.bulkBurst
    }

    /// How long past its due time a burst may hold an entry back: ten write-back delays (20 s
    /// by default), so a store that never stops changing still uploads, a little behind.
    static func longestHold(_ store: StoreRuntime) -> Double { 10 * store.config.writebackDelay }

    /// Sleeps while a burst holds `store`'s uploads back: until it has been quiet for its
    /// write-back delay (or the drive idle, see `holdUntil`), until `limit`, or until the
    /// uploader stops or drains. Polls a clock and
    /// an atomic every 20 ms at most; the queue's signals, which every save sends, do not wake it.
    func sleepThroughBurst(_ store: StoreRuntime, until limit: Double) {
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
    func upload(_ job: UploadJob, _ store: StoreRuntime, _ key: String, _ batch: UploadBatch) -> UploadQueue.Ending {
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
            // Asked again from now on, and its waiting files retried once it answers.
            if error.code == .unreachable { remotesDown.withLock { _ = $0.insert(key) } }
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
    func reconcile(_ key: String, _ store: StoreRuntime) {
        guard let start = startReconcile(key, store, placingEarly: false) else { return }
        finishReconcile(key, store, start)
    }

    /// `reconcile` up to the first step of its poll (StoreSync.startPoll); nil when stopping.
    func startReconcile(_ key: String, _ store: StoreRuntime, placingEarly: Bool) -> StoreSync.PollStart? {
        store.sync.compareLocal { stopping.load(ordering: .relaxed) || store.stopped.load(ordering: .relaxed) }
        // What failed before goes again now (its remote may be back, its file gone).
        _ = try? queue.makeDue(.all, root: key)
        if stopping.load(ordering: .relaxed) || store.stopped.load(ordering: .relaxed) { return nil }
        return store.sync.startPoll(placingEarly: placingEarly)
    }

    func finishReconcile(_ key: String, _ store: StoreRuntime, _ start: StoreSync.PollStart) {
        store.sync.finishPoll(start)
        trimMalloc()
        try? queue.remove(root: key, path: Self.wholeStore)
        logger.info("store \(store.config.name): compared the local copy with the remote")
    }

    /// Looks at the remote every `poll` seconds (at once when `docdrive sync` asks) for what
    /// other devices changed; less often when a look takes long (`nextPoll`).
    func startPoller(_ key: String, _ store: StoreRuntime, finishing first: StoreSync.PollStart?) {
        let t = Thread { [self] in
            dd_background_thread()
            Sys.nameThisThread("poll-\(store.config.name)")
            CrashGuard.working(for: store.config.name)
            if let first { finishReconcile(key, store, first) }
            var due = Self.nextPoll(began: Date().timeIntervalSince1970, took: 0, every: store.config.poll)
            while !stopping.load(ordering: .relaxed) && !store.stopped.load(ordering: .relaxed) {
                usleep(50_000)
                let now = Date().timeIntervalSince1970
                let wanted = store.sync.polls.takeWanted()
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
}
