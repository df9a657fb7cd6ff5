// Drive: one drive's parts, made in their order and owned here (DESIGN.md 8). The composition
// root of the core: the daemon makes one Drive and serves it; a test that needs less makes a
// drive with fewer stores, never one with a part left out.
import Logging

/// What a drive is made of, in the order it is made:
/// 1. `index`: the item index (given: the caller opens it, and starts its writer);
/// 2. `changes`: the drive's one stream of changes (DriveChanges), with the node table, the
///    index and the upload scheduler as its first subscribers, and `configWatch`, the one watch
///    of config.yaml, which publishes a new config into it;
/// 3. `openFiles`: the files open through the mount, which the file system counts and the sync
///    engine asks about (as its `LocalFiles`);
/// 4. `sync`: every store's sync, uploads and files on demand (the `SyncService`), publishing
///    into 2 and asking 3; its status marks subscribe to 2;
/// 5. `fs`: the file system over all of it, publishing into 2 and subscribing to it (the kernel's
///    cache of what changed behind the mount, pictures); then the namespace and the sync follow
///    the config there, in that order, then the maker's subscribers;
/// 6. `documents`: the document modes, over 5, publishing into 2.
/// The coordinator is the sync's (`sync.coordinator`), shared with the file system.
public final class Drive: Sendable {
    public let home: DriveHome
    public let index: ItemIndex
    public let configWatch: ConfigWatch
    public let openFiles: OpenFiles
    public let changes: DriveChanges
    public let sync: SyncService
    public let fs: DriveFileSystem
    public let documents: DocumentService

    /// `subscribers`: follow every change after the drive's own parts (DriveChanges);
    /// `probe`: a test's moments in the sync engine.
    public init(home: DriveHome, config: DriveConfig, index: ItemIndex, options: FileSystemOptions = .init(), logger: Logger,
                subscribers: [any DriveChangeSubscriber] = [], probe: SyncProbe? = nil) {
        self.home = home
        self.index = index
        changes = DriveChanges(index: index)
        configWatch = ConfigWatch(home: home, changes: changes)
        openFiles = OpenFiles()
        sync = SyncService(home: home, config: config, index: index, logger: logger, configWatch: configWatch, localFiles: openFiles, changes: changes,
                        probe: probe, indexWriteError: { [index] in index.writeError })
        changes.subscribe(sync.statusMarks)
        fs = DriveFileSystem(home: home, config: config, index: index, options: options, sync: sync, openFiles: openFiles,
                             changes: changes, logger: logger)
        // A store added shows in the mount before its sync starts.
        changes.subscribeWeakly(fs.namespace)
        changes.subscribeWeakly(sync)
        for s in subscribers { changes.subscribe(s) }
        documents = DocumentService(fs: fs)
    }

    /// Starts the stores' sync: what a crash interrupted is recovered, workers and pollers run.
    public func start() { sync.start() }

    /// Stops the stores' sync after at most `seconds` of uploading what is queued; returns how
    /// many files are still to upload (they go at the next start).
    public func stop(drainFor seconds: Double) -> Int { sync.stop(drainFor: seconds) }

    /// Closes every backing descriptor and the index (after unmount and `stop`).
    public func shutdown() { fs.shutdown() }
}
