// FuseContext: what every FUSE callback reaches through the request's userdata.
import CFuse
import Foundation
import DocDriveCore
import Logging
import Synchronization

/// Shared by all callbacks; immutable after the session starts.
public final class FuseContext: Sendable {
    let fs: DriveFileSystem
    let logger: Logger
    /// Called once INIT is answered; the argument says whether file I/O is passed through.
    let onReady: @Sendable (Bool) -> Void
    let passthrough: Passthrough
    /// Mounted with default_permissions: the kernel checks permissions from the attributes we
    /// report. Without it (a private mount), the backing files check them, for the daemon's
    /// user, who is the only caller.
    let kernelChecksPermissions: Bool
    /// The libfuse session, set while mounted (for notifications), and how many notifications
    /// are being sent. Lock: a leaf, never held across a call into libfuse (`notify`).
    let session = Mutex<SessionState>(SessionState())
    /// Told of every request and of files opened for writing (nil: nothing is uploaded).
    let activity: MountActivity
    /// Waits for the RELEASEs the kernel has queued (created files are opened without FLUSH
    /// when it can).
    let releases: QueuedReleases
    /// Created files the kernel has not released yet (released by the session at its end).
    let unreleased = UnreleasedFiles()

    init(fs: DriveFileSystem, logger: Logger, mountpoint: String, passthrough: Bool, kernelChecksPermissions: Bool,
         onReady: @escaping @Sendable (Bool) -> Void) {
        self.fs = fs
        self.releases = QueuedReleases(mountpoint: mountpoint, logger: logger)
        self.logger = logger
        self.onReady = onReady
        self.passthrough = Passthrough(wanted: passthrough, logger: logger)
        self.kernelChecksPermissions = kernelChecksPermissions
        self.activity = fs.sync.activity
    }

    /// Makes the kernel fetch a node's attributes again on next use.
    func invalidateAttributes(_ ino: UInt64) {
        notify { se in _ = fuse_lowlevel_notify_inval_inode(se, ino, -1, 0) }
    }

    /// Runs `body` with the session while mounted, outside the session's lock: the kernel may
    /// make a notification wait for a folder's lock that a request holds, and that request's
    /// handler may notify too (with the lock held across the call, a sync thread's entry
    /// invalidation and an open's attribute invalidation deadlocked the mount).
    func notify(_ body: (OpaquePointer) -> Void) {
        let se = session.withLock { s -> OpaquePointer? in
            guard let p = s.pointer.pointer else { return nil }
            s.notifying += 1
            return p
        }
        guard let se else { return }
        defer { session.withLock { $0.notifying -= 1 } }
        body(se)
    }

    /// No notification starts from now on; waits (at most `seconds`) for those being sent.
    func endNotifications(waiting seconds: Double) {
        session.withLock { $0.pointer = SessionPointer(nil) }
        let deadline = Date().addingTimeInterval(seconds)
        while session.withLock({ $0.notifying }) > 0 && Date() < deadline { usleep(10_000) }
    }
}

/// The context of a request. Every callback starts here, so this is also where the uploader
/// hears that the drive is in use (MountActivity: a burst's uploads wait while it is).
@inline(__always)
func context(_ req: fuse_req_t?) -> FuseContext {
    let ctx = Unmanaged<FuseContext>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    ctx.activity.noteRequest()
    return ctx
}

/// Set at INIT when the kernel agreed to leave the umask to us.
let dontMask = Atomic<Bool>(false)

@inline(__always)
func caller(_ req: fuse_req_t?) -> Caller {
    let c = fuse_req_ctx(req)!.pointee
    // With FUSE_CAP_DONT_MASK the kernel hands us the umask instead of applying it.
    return Caller(uid: c.uid, gid: c.gid, pid: c.pid, umask: dontMask.load(ordering: .relaxed) ? c.umask : nil)
}

/// The open file a FUSE file handle stands for (a retained pointer, released in release()).
@inline(__always)
func openFile(_ fi: UnsafeMutablePointer<fuse_file_info>?) -> OpenFile? {
    guard let fi, fi.pointee.fh != 0 else { return nil }
    return Unmanaged<OpenFile>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(fi.pointee.fh))!).takeUnretainedValue()
}

@inline(__always)
func directoryStream(_ fi: UnsafeMutablePointer<fuse_file_info>?) -> DirectoryStream? {
    guard let fi, fi.pointee.fh != 0 else { return nil }
    return Unmanaged<DirectoryStream>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(fi.pointee.fh))!).takeUnretainedValue()
}

@inline(__always)
func handleValue(_ object: AnyObject) -> UInt64 {
    UInt64(UInt(bitPattern: Unmanaged.passRetained(object).toOpaque()))
}

@inline(__always)
func entryParam(_ e: NodeEntry, _ fs: DriveFileSystem) -> fuse_entry_param {
    var p = fuse_entry_param()
    p.ino = e.inode.nodeID
    p.generation = 0
    p.attr = fs.kernelEntryAttributes(e)
    p.attr_timeout = fs.attributeTimeout(e.inode)
    p.entry_timeout = fs.entryTimeout(e.inode)
    return p
}

@inline(__always)
func replyEntry(_ req: fuse_req_t?, _ e: NodeEntry, _ fs: DriveFileSystem) {
    var p = entryParam(e, fs)
    if fuse_reply_entry(req, &p) != 0 {
        // The kernel did not take the reference (the request was interrupted): undo the lookup.
        fs.forget(e.inode.nodeID, 1)
    }
}
