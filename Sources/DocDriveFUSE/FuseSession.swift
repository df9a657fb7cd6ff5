// FuseSession: mounts the drive with libfuse, runs the multi-threaded loop, and unmounts on signal.
import CDocDriveSys
import CFuseTransport
import CFuse
import DocDriveCore
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One mounted session. `run()` blocks until the mount goes away (unmount, or a signal).
public final class FuseSession: Sendable {
    public let mountpoint: String
    private let context: FuseContext
    private let mountOptions: String
    private let logger: Logger

    /// - Parameters:
    ///   - options: comma-separated mount options, already checked by the caller.
    ///   - onReady: called once the kernel has completed INIT (requests are being served), with
    ///     whether file I/O is passed through.
    ///   - passthrough: let the kernel read and write open files' backing files itself when it
    ///     can (Linux 6.9+, a daemon running as root); otherwise file I/O goes through the drive.
    ///     Not with noatime: the kernel opens its own backing file with the opener's flags, and
    ///     its reads move the backing file's atime; the drive's reads use O_NOATIME.
    public init(fs: DriveFileSystem, mountpoint: String, options: String, logger: Logger,
                passthrough: Bool = true, onReady: @escaping @Sendable (Bool) -> Void) {
        self.mountpoint = mountpoint
        self.mountOptions = options
        self.logger = logger
        self.context = FuseContext(fs: fs, logger: logger, mountpoint: mountpoint,
                                   passthrough: passthrough && geteuid() == 0 && !fs.options.writebackCache
                                       && !fs.options.accessTimes.filesKept,
                                   kernelChecksPermissions: options.split(separator: ",").contains("default_permissions"),
                                   onReady: onReady)
    }

    /// Shows the mount's access-time options in the mount table (findmnt, /proc/mounts), as
    /// the drive honours them (FileSystemOptions.accessTimes). A daemon that is not root cannot:
    /// the table then shows relatime (or noatime), and the drive still does what was asked.
    private func applyAccessTimes() {
        // noatime alone libfuse sets itself.
        guard mountOptions.split(separator: ",").contains(where: { AccessTimes.optionNames.contains(String($0)) && $0 != "noatime" }) else { return }
        let t = context.fs.options.accessTimes
        if dd_set_mount_atime(mountpoint, t.filesKept ? 1 : 0, t.strict ? 1 : 0, t.foldersKept && !t.filesKept ? 1 : 0) != 0 {
            logger.warning("the mount table cannot show the access-time options (\(String(cString: strerror(errno)))); the drive does what they say")
        }
    }

    /// Mounts, serves requests until unmounted, then returns. Throws a sentence if mounting fails.
    /// - Parameter maxThreads: libfuse's worker limit. A process waiting for a lock (F_SETLKW,
    ///   blocking flock) occupies a worker while it waits, so there is room for many waiters.
    public func run(maxThreads: UInt32 = 64) throws(DriveError) {
        // libfuse 3.14 knows noatime only of the access-time options: the others are set on the
        // mount once it is made (applyAccessTimes); the drive itself does what they say.
        let libfuseOptions = mountOptions.split(separator: ",")
            .filter { !AccessTimes.optionNames.contains(String($0)) || $0 == "noatime" }.joined(separator: ",")
        var argStrings = ["docdrive", "-o", libfuseOptions]
        var cargs = argStrings.map { strdup($0) }
        defer { cargs.forEach { free($0) } }
        var ops = makeOperations()
        let se: OpaquePointer? = cargs.withUnsafeMutableBufferPointer { buf in
            var args = cfuse_args_init(Int32(buf.count), buf.baseAddress)
            defer { fuse_opt_free_args(&args) }
            return fuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size,
                                    Unmanaged.passUnretained(context).toOpaque())
        }
        argStrings.removeAll()
        guard let se else {
            throw DriveError(.mount, "libfuse refused the mount options \"\(mountOptions)\" (see the daemon log for the one it did not know).")
        }
        defer { fuse_session_destroy(se) }
        if fuse_session_mount(se, mountpoint) != 0 {
            throw DriveError(.mount, "Cannot mount on \(mountpoint): the kernel refused (is /dev/fuse available and fuse3 installed? the daemon log has libfuse's reason).")
        }
        applyAccessTimes()
        // Requests and replies pass through our I/O functions, which add passthrough to the
        // replies libfuse 3.14 cannot express (see docdrive_passthrough.h) and record which
        // request each worker holds (for the release barrier, docdrive_requests.h).
        var io = fuse_custom_io(writev: dd_fuse_io_writev, read: dd_fuse_io_read,
                                splice_receive: nil, splice_send: dd_fuse_io_splice_send)
        if fuse_session_custom_io(se, &io, fuse_session_fd(se)) == 0 {
            setPollingTime()
            prepareRings(se)
            context.releases.available.store(true, ordering: .relaxed)
            context.fs.setReleaseBarrier(ReleaseBarrier { [releases = context.releases] in releases.wait() })
        } else {
            logger.warning("libfuse refused the custom I/O; file I/O goes through the drive and every close is flushed")
        }
        context.passthrough.setDevice(fuse_session_fd(se))
        context.session.withLock { $0.pointer = SessionPointer(se) }
        // Entries and attributes of watched backing folders are kept long by the kernel, and
        // dropped from its cache when the watch sees them change (FileSystem+KernelCache).
        // Commands of the control socket and the sync's changes drop entries the same way.
        let kept = context.fs.startKernelCache(KernelInvalidation(
            attributes: { [context] ino in context.invalidateAttributes(ino) },
            entry: { [context] parent, name in context.notify { se in _ = fuse_lowlevel_notify_inval_entry(se, parent, name, strlen(name)) } }))
        if !kept { logger.warning("inotify is not available: the kernel keeps entries and attributes for a second only") }
        logger.info("mounted at \(mountpoint) with -o \(mountOptions)")
        let rc = cfuse_session_loop_mt(se, 4, maxThreads)
        let ringRequests = dd_uring_requests()
        dd_uring_stop()
        if ringRequests > 0 { logger.info("the rings delivered \(ringRequests) requests") }
        context.releases.available.store(false, ordering: .relaxed)
        context.fs.setReleaseBarrier(nil)
        // Releases the kernel dropped with the connection (an abort ends the requests it still
        // holds; an unmount lets them through first, and cannot end a connection whose files are
        // still open, so such a file was closed, or its process has lost it with the abort).
        let dropped = context.unreleased.drain()
        for h in dropped {
            closeOpenFile(context, Unmanaged<OpenFile>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(h))!).takeUnretainedValue())
        }
        if !dropped.isEmpty { logger.info("released \(dropped.count) created file(s) whose release the kernel dropped with the connection; their saves are noted") }
        context.fs.stopKernelCache()
        context.session.withLock { $0.pointer = SessionPointer(nil) }
        fuse_session_unmount(se)
        // A notification still waiting in the kernel ends with the connection; the session is
        // destroyed after it (or after 5 s).
        context.endNotifications(waiting: 5)
        logger.info("session loop ended (\(rc)); unmounted \(mountpoint)")
    }

    /// `DOCDRIVE_FUSE_SPIN_US` in the daemon's environment: how long a worker polls /dev/fuse
    /// before it sleeps in its read (docdrive_requests.h); a value that is not one is logged.
    private func setPollingTime() {
        guard let v = ProcessInfo.processInfo.environment["DOCDRIVE_FUSE_SPIN_US"], !v.isEmpty else { return }
        guard let us = Int32(v), (0...10_000).contains(us) else {
            logger.warning("DOCDRIVE_FUSE_SPIN_US=\(v) is not a number of microseconds from 0 to 10000: workers poll for \(DD_FUSE_SPIN_US) µs")
            return
        }
        dd_fuse_set_spin_us(us)
        logger.info("workers poll /dev/fuse for \(us) µs before they sleep (DOCDRIVE_FUSE_SPIN_US)")
    }

    /// FUSE over io_uring (docdrive_uring.h): asked for unless `DOCDRIVE_FUSE_URING=0`; the
    /// kernel offers it when the fuse module's `enable_uring` parameter is on. The rings are set
    /// up after INIT, on their own threads, which log what became of them.
    private func prepareRings(_ se: OpaquePointer) {
        let v = ProcessInfo.processInfo.environment["DOCDRIVE_FUSE_URING"] ?? ""
        guard v != "0" else {
            logger.info("requests come through /dev/fuse (DOCDRIVE_FUSE_URING=0)")
            return
        }
        if !v.isEmpty && v != "1" {
            logger.warning("DOCDRIVE_FUSE_URING=\(v) is neither 0 nor 1: the rings are used when the kernel offers them")
        }
        ringLogger.withLock { $0 = logger }
        dd_uring_set_report { error, sentence in
            guard let sentence, let logger = ringLogger.withLock({ $0 }) else { return }
            if error == 0 { logger.info("\(String(cString: sentence))") } else { logger.warning("\(String(cString: sentence))") }
        }
        let r = dd_uring_prepare(se, fuse_session_fd(se))
        if r != 0 { logger.warning("io_uring: the rings cannot be prepared (\(String(cString: strerror(-r)))); requests come through /dev/fuse") }
    }

    /// Asks the session to end (from a signal): unmounting makes the kernel close the connection,
    /// which ends the loop once the last request is answered.
    public func requestExit() {
        context.releases.available.store(false, ordering: .relaxed)  // no request would answer it
        context.session.withLock { s in
            guard let se = s.pointer.pointer else { return }
            fuse_session_exit(se)
            fuse_session_unmount(se)
        }
    }
}

/// Where the rings' threads report (one session per process).
private let ringLogger = Mutex<Logger?>(nil)

/// libfuse's session pointer; read only under `FuseContext.session`'s lock.
struct SessionPointer: @unchecked Sendable {
    let pointer: OpaquePointer?
    init(_ p: OpaquePointer?) { pointer = p }
}

/// The session while mounted, and the notifications being sent with it (`FuseContext.notify`).
struct SessionState: Sendable {
    var pointer = SessionPointer(nil)
    var notifying = 0
}
