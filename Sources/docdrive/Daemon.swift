// Daemon: the mounted drive's process: lock, index, FUSE session, signals, clean exit.
import CDocDriveSys
import DocDriveCore
import DocDriveFUSE
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

struct Daemon {
    let home: DriveHome
    let config: DriveConfig
    let mountpoint: String
    let options: String
    let readyFD: Int32?
    /// Seconds the daemon keeps uploading after the unmount before it exits.
    let uploadGrace: Double
    /// Let the kernel read and write open files' backing files itself where it can.
    let passthrough: Bool

    /// Tells the waiting `docdrive mount` how it went (once), through the ready pipe.
    static func tell(_ fd: Int32?, _ message: String) {
        guard let fd, fd >= 0 else { return }
        let line = message + "\n"
        _ = line.withCString { write(fd, $0, strlen($0)) }
        close(fd)
    }

    func run() throws {
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = ProcessInfo.processInfo.environment["DOCDRIVE_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info
            return h
        }
        let logger = Logger(label: "docdrive")
        do throws(DriveError) {
            try serve(logger: logger)
        } catch let e {
            logger.error("\(e.message)")
            Self.tell(readyFD, "error " + e.message)
            throw e
        }
    }

    private func serve(logger: Logger) throws(DriveError) {
        var limit: UInt64 = 0
        if dd_set_nofile_limit_max(&limit) == 0 { logger.info("open file limit \(limit)") }
        // The kernel has already applied the caller's umask to every mode it sends us: the
        // daemon's own umask must not mask it a second time.
        umask(0)
        let lock = try home.acquireDriveLock()
        defer { close(lock) }
        // A fault on a thread that works for a store names it, so that the next mount holds it
        // offline rather than dying in it again (CrashGuard).
        try CrashGuard.install(home)
        let index = try ItemIndex(path: home.indexPath)
        index.startWriter()
        var fsOptions = FileSystemOptions()
        fsOptions.accessTimes = AccessTimes(mountOptions: options.split(separator: ",").map(String.init))
        let drive = Drive(home: home, config: config, index: index, options: fsOptions, logger: logger)
        let fs = drive.fs, sync = drive.sync, documents = drive.documents
        drive.start()
        // The document modes, for the commands: import copies a crash left are removed first.
        if let n = try? documents.removeImports(), n > 0 { logger.info("removed \(n) import copies left by the last run") }
        // The query index follows the backing folders on its own thread (QueryEngine).
        let queryEngine = try QueryEngine(home: home, config: config, logger: logger)
        drive.changes.subscribeWeakly(queryEngine)  // after the sync (DriveChanges)
        if !QueryEngine.isDisabled { queryEngine.start() }
        defer { queryEngine.stop() }
        let queries = QueryService(engine: queryEngine, mountpoint: mountpoint)
        // `docdrive status`: for the stores of the config as it is now (the uploader follows it
        // within half a second), from this process's memory and its index readers.
        let driveStatus: @Sendable () -> DriveStatus = { [home, config] in
            let stores = ((try? home.loadConfig(checkingRemotes: false)) ?? config).stores
            return DriveStatus.gather(home: home, stores: stores, index: index, sync: sync, references: documents.references())
        }
        let control = try ControlServer(home: home, logger: logger) { request, connection in
            Self.answer(request, on: connection, fs: fs, documents: documents, queries: queries, sync: sync, status: driveStatus)
        }
        control.start()
        // File managers' emblems: the desktop status socket, where a runtime folder exists.
        let status = Self.startStatusServer(home: home, mountpoint: mountpoint, logger: logger,
                                            service: FileStatusService(fs: fs, documents: documents))
        let ready = Mutex<Int32?>(readyFD)
        let notify = SystemdNotify.fromEnvironment()
        let serving = ServingFlag()
        let record = MountRecord(pid: getpid(), mountpoint: mountpoint, started: Date().timeIntervalSince1970, options: options)
        let session = FuseSession(fs: fs, mountpoint: mountpoint, options: options, logger: logger,
                                  passthrough: passthrough) { [home] passedThrough in
            var record = record
            record.fileIO = passedThrough ? "passthrough" : "daemon"
            try? home.writeMountRecord(record)
            ready.withLock { fd in
                Daemon.tell(fd, "ready")
                fd = nil
            }
            fs.thumbnails.setMountpoint(mountpoint)
            notify?.send("READY=1\nSTATUS=Mounted at \(mountpoint)")
            if let notify { Daemon.reportUploads(notify, index.uploads, while: serving) }
        }
        let signals = Self.watchSignals(logger: logger) { session.requestExit() }
        defer { signals.forEach { $0.cancel() } }
        defer {
            serving.value.store(false, ordering: .relaxed)
            let waiting = (try? index.uploads.waitingCount()) ?? 0
            notify?.send("STOPPING=1\nSTATUS=Unmounted; uploading \(waiting) file\(waiting == 1 ? "" : "s") (at most \(Int(uploadGrace)) s) before exit")
            control.stop()
            sync.statusChanges.stop()  // `status --watch` commands see the end of their stream
            status?.stop()
            // Import mode's copies last as long as the mount.
            if let n = try? documents.removeImports(), n > 0 { logger.info("removed \(n) import copies") }
            // New writes stopped with the mount; upload what can be within the grace time.
            let left = drive.stop(drainFor: uploadGrace)
            logger.info(left == 0 ? "all uploads done" : "\(left) file\(left == 1 ? " is" : "s are") still to upload; \(left == 1 ? "it goes" : "they go") on at the next mount")
            drive.shutdown()
            home.removeMountRecord()
        }
        try session.run()
        logger.info("daemon done")
    }

    /// Answers one request of the control socket (on the connection's own thread).
    static func answer(_ request: ControlRequest, on connection: ControlConnection, fs: DriveFileSystem, documents: DocumentService,
                       queries: QueryService, sync: SyncService, status: () -> DriveStatus) {
        switch request {
        case .open(let r):
            connection.answer { () throws(DriveError) in
                try documents.open(app: r.app, path: r.path, as: r.name, into: r.into, noRename: r.noRename)
            }
        case .importDocument(let r):
            connection.answer { () throws(DriveError) in try documents.importDocument(app: r.app, path: r.path) }
        case .move(let r):
            connection.answer { () throws(DriveError) in try documents.move(app: r.app, path: r.path, to: r.to, noRename: r.noRename) }
        case .export(let r):
            connection.answer { () throws(DriveError) in try documents.export(app: r.app, path: r.path, to: r.to, noRename: r.noRename) }
        case .bookmarkCreate(let r):
            connection.answer { () throws(DriveError) in try documents.createBookmark(app: r.app, path: r.path) }
        case .bookmarkResolve(let r):
            connection.answer { () throws(DriveError) in try documents.resolveBookmark(app: r.app, token: r.token) }
        case .grantsList(let r):
            connection.answer { () throws(DriveError) in GrantsAnswer(grants: try documents.listGrants(app: r.app)) }
        case .grantsRevoke(let r):
            connection.answer { () throws(DriveError) in try documents.revokeGrant(app: r.app, path: r.path) }
        case .appClose(let r):
            connection.answer { () throws(DriveError) in try documents.closeApp(r.app) }
        case .status:
            connection.answer { status() }
        case .statusWatch:
            DriveStatus.watch(on: connection, changes: sync.statusChanges, gather: status)
        case .syncPoll(let r):
            connection.answer { () -> SyncPollAnswer in
                let mark = sync.workMark()
                // A file closed before the sync whose release the kernel still has queued is
                // a save too (FileSystem+Releases).
                fs.awaitQueuedReleases()
                if r.retryFailed == true { sync.retryFailedNow() }
                let queued = r.compare == true ? sync.compareWithRecords() : 0
                let (stores, polled) = sync.pollAndWait(timeout: r.timeout ?? 120)
                fs.waitForKernelNotices()  // what arrived shows when sync returns
                return SyncPollAnswer(stores: stores, idle: polled && queued == 0 && sync.isIdle(since: mark))
            }
        case .query(let q):
            queries.answer(q, on: connection)
        case .queryWatch(let q):
            queries.watch(q, on: connection)
        case .pin(let r):
            connection.answer { () throws(DriveError) in
                let (root, path) = try documents.storeItem(r.path)
                let files = try sync.onDemand.pin(root: root, path: path, on: r.on)
                let prefix = r.path.split(separator: "/").first.map(String.init) ?? ""
                return PinAnswer(files: files.count, toFill: files.filter(\.placeholder).map {
                    FileSize(path: prefix + "/" + $0.path.description, size: $0.size)
                })
            }
        case .fill(let r):
            connection.answer { () throws(DriveError) in
                let (root, path) = try documents.storeItem(r.path)
                return FillAnswer(path: r.path, size: try sync.onDemand.fillAndWait(root: root, path: path))
            }
        case .evict(let r):
            connection.answer { () throws(DriveError) in
                let (root, path) = try documents.storeItem(r.path)
                return try sync.onDemand.evict(root: root, path: path)
            }
        }
    }

    /// The desktop status socket (StatusServer), or nil, said in the log, when there is no
    /// runtime folder for it or it cannot listen: the drive works without it.
    static func startStatusServer(home: DriveHome, mountpoint: String, logger: Logger, service: FileStatusService) -> StatusServer? {
        guard let folder = StatusServer.folder() else {
            logger.info("no XDG_RUNTIME_DIR: no status socket for file managers")
            return nil
        }
        do throws(DriveError) {
            let s = try StatusServer(folder: folder, mountpoint: mountpoint, home: home, service: service, logger: logger)
            s.start()
            logger.info("status socket for file managers: \(s.path)")
            return s
        } catch {
            logger.warning("no status socket for file managers: \(error.message)")
            return nil
        }
    }

    /// Tells systemd how many saved files wait for their upload (`systemctl status` shows it),
    /// when that changes (looked at twice a second), while the mount serves.
    static func reportUploads(_ notify: SystemdNotify, _ queue: UploadQueue, while serving: ServingFlag) {
        let t = Thread {
            var last = -1
            while serving.value.load(ordering: .relaxed) {
                let n = (try? queue.waitingCount()) ?? 0
                if n != last {
                    notify.send(n == 0 ? "STATUS=Mounted; everything saved is uploaded" : "STATUS=Mounted; \(n) file\(n == 1 ? "" : "s") to upload")
                    last = n
                }
                for _ in 0..<5 where serving.value.load(ordering: .relaxed) { usleep(100_000) }
            }
        }
        t.name = "docdrive-notify"
        t.start()
    }

    /// SIGTERM, SIGINT and SIGHUP end the session cleanly (they unmount).
    static func watchSignals(logger: Logger, _ handler: @escaping @Sendable () -> Void) -> [DispatchSourceSignal] {
        [SIGTERM, SIGINT, SIGHUP].map { sig in
            signal(sig, SIG_IGN)
            let s = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            s.setEventHandler {
                logger.info("signal \(sig): unmounting")
                handler()
            }
            s.resume()
            return s
        }
    }
}

/// Whether the mount still serves (read by the status thread).
final class ServingFlag: Sendable {
    let value = Atomic<Bool>(true)
}
