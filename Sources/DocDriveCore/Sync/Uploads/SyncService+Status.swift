// SyncService+Status: what the commands and the status ask of the stores: a poll now, the remotes'
// states, retries, what `docdrive status` shows of the running stores, a file's FileState.
import CDocDriveSys
import Crypto
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

extension SyncService {
    /// Asks every store to look at its remote now, listing all of it where a quiet poll would
    /// not see another tool's writes (S3); returns the poll counts to wait past.
    public func pollNow() -> [String: Int] {
        var out = [String: Int]()
        for (key, store) in allStores() {
            if !store.sync.remote.fingerprintSeesEveryWriter { store.sync.lastListing.wantWhole() }
            out[key] = store.sync.polls.started
            store.sync.polls.want()
        }
        return out
    }

    /// How many polls of the store `root` ended at the remote's fingerprint, nothing having
    /// changed since a poll that found nothing to do (`StoreSync.startPoll`).
    package func quietPolls(root: String) -> Int {
        store(root)?.sync.polls.quiet ?? 0
    }

    /// At most this many polls in a row end at the fingerprint.
    package static var quietPollsInARow: Int { ListingMemory.quietPollsInARow }

    /// Whether every store finished a poll that started after `marks` were taken (polls run
    /// one at a time per store, so the polls done then exceed the polls started at the mark).
    public func polledSince(_ marks: [String: Int]) -> Bool {
        allStores().allSatisfy { key, store in
            store.sync.polls.ended >= (marks[key] ?? 0) + 1
        }
    }

    /// Per store: last poll, offline state, devices seen on the remote.
    public func remoteStates() -> [String: RemoteState] {
        Dictionary(uniqueKeysWithValues: allStores().values.map { ($0.config.name, $0.sync.status.remote) })
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
                guard !scheduler.isNoted(root: key, path: p), (try? queue.state(root: key, path: p))?.0 ?? .synced == .synced else { return false }
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
        guard jobsEnded.load(ordering: .relaxed) == mark, scheduler.isEmpty() else { return false }
        return (try? queue.waitingCount()) == 0
    }

    /// What the daemon runs of each store, by name (`docdrive status`): its workers, whether
    /// a burst of changes holds its uploads back, its remote as the last poll found it.
    func runningStores() -> [String: (workers: Int, held: Bool, remote: RemoteState)] {
        let now = Date().timeIntervalSince1970
        return Dictionary(allStores().values.map {
            ($0.config.name, (workers: $0.config.workers, held: holdUntil($0, now: now) != nil, remote: $0.sync.status.remote))
        }, uniquingKeysWith: { a, _ in a })
    }

    /// The last failed write to the index or the upload queue, until a write works again.
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
        FileState.ofStoreFile(filling: onDemand.isFilling(root: root, path: path),
                              inConflict: index.bases.inConflict(root: root, path: path.description),
                              noted: scheduler.isNoted(root: root, path: path),
                              queued: (try? queue.state(root: root, path: path))?.0,
                              unrecorded: { isFile && unrecorded(root: root, path: path) },
                              isPlaceholder: { isFile && isPlaceholder() })
    }

    /// Whether the file at `path` has nothing waiting and no record of being on the remote
    /// (no base): then it is not synced, whatever left it so, and it is looked at again (at
    /// most every `recheckInterval` per path). A safety net: "synced" is never said of a file
    /// the remote may not have.
    func unrecorded(root: String, path: StorePath) -> Bool {
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
            scheduler.noteChanged(root: root, path: path)
        }
        return true
    }
}
