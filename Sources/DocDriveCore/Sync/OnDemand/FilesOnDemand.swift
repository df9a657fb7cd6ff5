// FilesOnDemand: the drive's side of content on demand. Opens of placeholders wait for one
// download per file (on a store's download thread, never a FUSE request thread, a few at once:
// Downloads.swift), downloads ahead, filled files' times, the control commands pin, unpin, fill
// and evict, and documents' pictures on the remotes. A part of the sync service (`SyncService`),
// over the same running stores.
import Foundation
import Logging
import Synchronization

public final class FilesOnDemand: Sendable {
    let stores: RunningStores
    /// Paths whose state may have changed, for the desktop status socket.
    let statusMarks: StatusMarks
    let logger: Logger
    /// Placeholders asked for or being filled now, with who waits for each: one download per
    /// file, however many opens wait for it, a few per store at once (Downloads.swift).
    let downloads = Downloads()
    /// Filled placeholders keep showing their ctime (FilledTimes.swift).
    public let filledTimes = FilledTimes()
    /// Where pictures go to the remotes (`publishPicture`), one at a time.
    let pictures = DispatchQueue(label: "docdrive-pictures", qos: .utility)

    init(stores: RunningStores, statusMarks: StatusMarks, logger: Logger) {
        self.stores = stores
        self.statusMarks = statusMarks
        self.logger = logger
    }

    func store(_ rootKey: String) -> StoreRuntime? { stores.store(rootKey) }

    /// The indexer or thumbnailer `pid` runs when the store `root` refuses it placeholders'
    /// content (`indexers: skip`), else nil.
    public func refusedIndexer(_ root: String, pid: Int32) -> String? {
        guard let store = store(root), store.config.indexers == .skip else { return nil }
        return BackgroundReaders.indexer(pid: pid)
    }

    /// Fills the placeholder at `path` of the store `root` on one of the store's download
    /// threads (Downloads.swift: a few at once, opens before readahead), then calls `done` there
    /// (nil: filled, or it was no placeholder). A call for a path asked for already waits for
    /// the same download. `opened`: a program opened it (it counts for readahead). Never waits.
    public func fill(root: String, path: StorePath, opened: Bool = false, ahead: Bool = false,
                     done: @escaping @Sendable (DriveError?) -> Void) {
        guard let store = store(root) else {
            done(DriveError(.notFound, "The store of \(path) is not in the config any more."))
            return
        }
        if opened, readsAhead(store) {
            let now = ProcessInfo.processInfo.systemUptime
            store.readaheadWork.async { [self] in
                let more = store.sync.readahead.openedPlaceholder(path, now: now) { store.sync.filesForReadahead(in: $0) }
                fetchAhead(root, store, more)
            }
        }
        statusMarks.mark(root: root, path: path)
        downloads.request(Self.fillingKey(root, path), lane: root, slots: store.downloadSlots, priority: ahead ? .ahead : .open,
                          name: store.config.name, job: { [filledTimes, statusMarks] priority in
            var failure: DriveError?
            do throws(DriveError) {
                try store.sync.hydrate(path, ahead: priority == .ahead, times: filledTimes)
            } catch {
                failure = error
            }
            store.sync.noteFill(path, failure)
            if failure == nil { store.sync.keepUnderCacheLimit(keeping: path) }
            statusMarks.mark(root: root, path: path)
            return failure
        }, done: done)
    }

    /// Makes the placeholder at `path` the user's file with `body` (an open with O_TRUNC, a
    /// truncate to 0) while no download of it runs (one only queued is dropped: who waits for
    /// it finds the user's file); false, with nothing done, while one runs (the caller waits
    /// for it, then goes on with a whole file).
    public func takePlaceholder(root: String, path: StorePath, _ body: () -> Void) -> Bool {
        downloads.take(Self.fillingKey(root, path), body)
    }

    /// Makes the content of the open file `fd` of store `root`, filled in this boot and not
    /// known to be on the disk yet, durable, and removes its "filled" mark (FillCommits.swift):
    /// before a writable open or a truncate makes it the user's file. False when it cannot be
    /// written to the disk.
    public func settleFill(root: String, fd: Int32) -> Bool {
        if let store = store(root) { return store.sync.fills.settle(fd: fd, times: filledTimes) }
        return fsync(fd) == 0 && Placeholder.clear(openFD: fd)
    }

    /// Whether the placeholder at `path` is asked for or being downloaded now.
    public func isFilling(root: String, path: StorePath) -> Bool {
        downloads.isAsked(Self.fillingKey(root, path))
    }

    /// Whether the placeholder at `path` is being downloaded now (not only queued).
    public func isDownloading(root: String, path: StorePath) -> Bool {
        downloads.isRunning(Self.fillingKey(root, path))
    }

    /// The key of a file in `downloads`.
    static func fillingKey(_ root: String, _ path: StorePath) -> String { Downloads.key(root, path) }

    /// Whether the store reads placeholders ahead: on demand, no cache limit (nothing is
    /// downloaded that was not asked for on a device short of space), `readahead: on`.
    func readsAhead(_ store: StoreRuntime) -> Bool {
        store.config.readahead && store.config.content == .onDemand && store.config.cacheLimit == nil
    }

    /// Downloads `list` ahead, and what each end lets go next; a failure ends the sequence
    /// (offline, or the remote changed).
    private func fetchAhead(_ root: String, _ store: StoreRuntime, _ list: [Readahead.Candidate]) {
        for c in list {
            fill(root: root, path: c.path, ahead: true) { [self] e in
                fetchAhead(root, store, store.sync.readahead.finished(c, failed: e != nil))
            }
        }
    }

    /// An open of the store file `ino` that is here already: when it was downloaded ahead, the
    /// next ones go. Cheap when nothing is read ahead (FUSE request threads call it).
    public func openedStoreFile(root: String, ino: UInt64) {
        guard let store = store(root), store.sync.readahead.active.load(ordering: .relaxed) else { return }
        let more = store.sync.readahead.openedFile(ino: ino, now: ProcessInfo.processInfo.systemUptime)
        if more.isEmpty { return }
        fetchAhead(root, store, more)
    }

    /// Fills the placeholder at `path` and waits for it (control commands: never a FUSE
    /// thread); returns the file's size.
    public func fillAndWait(root: String, path: StorePath) throws(DriveError) -> Int64 {
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<DriveError?>(nil)
        fill(root: root, path: path) { e in
            result.withLock { $0 = e }
            done.signal()
        }
        done.wait()
        if let e = result.withLock({ $0 }) { throw e }
        return try storeOf(root).sync.files(under: path).first?.size ?? 0
    }

    private func storeOf(_ root: String) throws(DriveError) -> StoreRuntime {
        guard let s = store(root) else { throw DriveError(.notFound, "That store is not in the config (or its remote cannot be used).") }
        return s
    }

    /// Pins (or unpins) `path`; returns the files at or under it (the placeholders among them
    /// are for the caller to fill: `docdrive pin` shows its progress).
    public func pin(root: String, path: StorePath, on: Bool) throws(DriveError) -> [(path: StorePath, placeholder: Bool, size: Int64)] {
        let store = try storeOf(root)
        try store.sync.setPinned(path, on)
        let files = try store.sync.files(under: path)
        for f in files { statusMarks.mark(root: root, path: f.path) }
        return files
    }

    /// Whether `path` or a folder above it is pinned (the desktop status socket).
    public func isPinned(root: String, path: StorePath) -> Bool {
        store(root)?.sync.isPinned(path) ?? false
    }

    /// Frees the space of every clean, closed, unpinned file at or under `path`.
    public func evict(root: String, path: StorePath) throws(DriveError) -> EvictAnswer {
        let store = try storeOf(root)
        var report = EvictAnswer(files: 0, evicted: 0, freed: 0, refused: [])
        for f in try store.sync.files(under: path) {
            report.files += 1
            if f.placeholder { continue }
            do {
                report.freed += try store.sync.evict(f.path)
                report.evicted += 1
            } catch {
                report.refused.append(error.message)
            }
        }
        return report
    }
}

// MARK: pictures

extension FilesOnDemand {
    /// Keeps a document's picture on its store's remote for the other devices (RemotePictures),
    /// on a queue of its own; a remote that cannot take it now is logged (the picture is made
    /// again at the document's next save).
    public func publishPicture(root: String, item: String, _ png: [UInt8]) {
        guard let store = store(root) else { return }
        pictures.async { [logger] in
            do throws(DriveError) {
                try store.remote.putPicture(item: item, png)
            } catch {
                logger.info("store \(store.config.name): the picture of item \(item) is not on the remote: \(error.message)")
            }
        }
    }

    /// The picture the store's remote keeps for `item` (nil: none, or the remote cannot say
    /// now). Never call it on a FUSE request thread.
    public func picture(root: String, item: String) -> [UInt8]? {
        guard let store = store(root) else { return nil }
        return try? store.remote.picture(item: item)
    }
}
