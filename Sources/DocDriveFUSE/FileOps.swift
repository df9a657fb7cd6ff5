// FileOps: FUSE callbacks for open files (open/create, read/write, flush/release, fsync, fallocate, lseek, copy_file_range).
import CFuseTransport
import CFuse
import DocDriveCore
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

@inline(__always)
private func fillOpen(_ fi: UnsafeMutablePointer<fuse_file_info>, _ f: OpenFile) {
    fi.pointee.fh = handleValue(f)
    // Never FOPEN_DIRECT_IO, even for O_DIRECT: the kernel already sends an O_DIRECT file's
    // reads and writes straight to us (its direct_IO path), and direct_io on the handle would
    // refuse mmap of that file (ENODEV), which a native filesystem allows.
    cfuse_fi_set_open_flags(fi, 0, f.keepCache ? 1 : 0, f.noFlush ? 1 : 0)
}

/// Sends the reply to an OPEN or CREATE (`send`), passed through to the backing file when the
/// node's other open files allow it (`mark` says which reply it is). False if the kernel did
/// not take the reply (the request was interrupted): the caller then releases `f`.
private func replyOpened(_ ctx: FuseContext, _ f: OpenFile, caller: Caller, _ mark: dd_fuse_reply_mark,
                         _ send: () -> Int32) -> Bool {
    // (Without passthrough every write comes to the drive: nothing to decide, no fstat.)
    let needsDrive = ctx.passthrough.isEnabled && ctx.fs.writesNeedTheDrive(f, caller: caller)
    let backingID = ctx.passthrough.opened(f, in: ctx.fs, throughDrive: needsDrive)
    // Passed through after all (the node's other files are): what its writes would drop goes now.
    if needsDrive, backingID > 0, ctx.fs.dropPrivilegeBits(of: f, writtenBy: caller) {
        ctx.invalidateAttributes(f.inode.nodeID)
    }
    if backingID > 0 {
        ctx.fs.writesBypass(f)
        // A shared mapping of it would change the times behind the kernel's cached attributes
        // (FileSystem+MappedTimes): drop them before the opener can map it.
        if ctx.fs.opensMappable(f) { ctx.invalidateAttributes(f.inode.nodeID) }
        dd_fuse_mark_reply(Int32(mark.rawValue), backingID)
    }
    let rc = send()
    dd_fuse_mark_reply(Int32(DD_REPLY_PLAIN.rawValue), 0)
    if rc != 0 { ctx.passthrough.released(f) }
    return rc == 0
}

/// The open file is done with (released by the kernel, or never handed to it, or left
/// unreleased when the session ended: `UnreleasedFiles`).
func closeOpenFile(_ ctx: FuseContext, _ f: OpenFile) {
    ctx.fs.release(f)
    if f.writable { ctx.activity.writerReleased() }
    Unmanaged.passUnretained(f).release()
}

func opOpen(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let ctx = context(req)
    let fs = ctx.fs
    let who = caller(req)
    do throws(Errno) {
        switch try fs.openOrFill(ino, flags: fi!.pointee.flags, caller: who) {
        case .opened(let f):
            replyOpen(ctx, req, fi!, f, caller: who)
        case .placeholder(let root, let path):
            // The content first, downloaded on another thread: this request thread goes back to
            // libfuse, and the reply is sent from there once the file is whole (the kernel
            // keeps the request; `fi` does not outlive this call, so a copy travels).
            let pending = PendingOpen(req: req, info: fi!.pointee)
            fs.fill(root: root, path: path) { failure in
                if let failure { return replyError(pending.req, failure) }
                // Its blocks, and its size if a newer version came. Noted as told first, so
                // that the watch, which sees the same change, does not invalidate them again
                // while the kernel fetches them (see `noteToldNow`).
                fs.noteToldNow(ino)
                ctx.invalidateAttributes(ino)
                var info = pending.info
                do throws(Errno) {
                    let f = try fs.open(ino, flags: info.flags, caller: who)
                    replyOpen(ctx, pending.req, &info, f, caller: who)
                } catch {
                    replyError(pending.req, error)
                }
            }
        }
    } catch {
        replyError(req, error)
    }
}

/// An OPEN request waiting for a placeholder's content (its reply comes from another thread,
/// which libfuse allows: a request is answered once, from anywhere).
private struct PendingOpen: @unchecked Sendable {
    let req: fuse_req_t?
    let info: fuse_file_info
}

private func replyOpen(_ ctx: FuseContext, _ req: fuse_req_t?, _ fi: UnsafeMutablePointer<fuse_file_info>, _ f: OpenFile,
                       caller: Caller) {
    fillOpen(fi, f)
    if f.writable { ctx.activity.writerOpened() }
    if !replyOpened(ctx, f, caller: caller, DD_REPLY_OPEN_PASSTHROUGH, { fuse_reply_open(req, fi) }) {
        closeOpenFile(ctx, f)
    }
}

func opCreate(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?, _ mode: mode_t,
              _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let ctx = context(req)
    let fs = ctx.fs
    do throws(Errno) {
        // Without FLUSH at its closes when the release barrier works (FileSystem+Releases):
        // one request fewer per created file.
        let who = caller(req)
        let (e, f) = try fs.create(parent: parent, name: name!, mode: mode, flags: fi!.pointee.flags, caller: who,
                                   noFlush: ctx.releases.available.load(ordering: .relaxed))
        fillOpen(fi!, f)
        if f.writable { ctx.activity.writerOpened() }
        if f.noFlush { ctx.unreleased.add(fi!.pointee.fh) }
        var p = entryParam(e, fs)
        if !replyOpened(ctx, f, caller: who, DD_REPLY_CREATE_PASSTHROUGH, {
            p.attr_timeout = fs.attributeTimeout(e.inode)  // as it is once passed through
            return fuse_reply_create(req, &p, fi)
        }) {
            if f.noFlush { ctx.unreleased.remove(fi!.pointee.fh) }
            fs.forget(e.inode.nodeID, 1)
            closeOpenFile(ctx, f)
        }
    } catch {
        replyError(req, error)
    }
}

func opRead(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ size: Int, _ off: off_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    _ = context(req)  // a read is activity too (without passthrough, reads come here)
    guard let f = openFile(fi) else { return replyError(req, .badFileDescriptor) }
    // libfuse preads (or splices) straight from the backing descriptor.
    _ = cfuse_reply_data_fd(req, f.fd, size, off)
}

func opWrite(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ buf: UnsafePointer<CChar>?, _ size: Int, _ off: off_t,
             _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let ctx = context(req)
    let fs = ctx.fs
    guard let f = openFile(fi) else { return replyError(req, .badFileDescriptor) }
    // Read first: it is this thread's current request's (FUSE_WRITE_KILL_SUIDGID).
    let kills = dd_fuse_request_kills_suidgid() != 0
    do throws(Errno) {
        let n = try fs.write(f, UnsafeRawPointer(buf!), count: size, offset: Int64(off))
        // The kernel's cached mode would keep the bits (an exec uses it): drop it.
        if kills, fs.dropPrivilegeBits(of: f, writtenBy: caller(req)) { ctx.invalidateAttributes(ino) }
        fuse_reply_write(req, n)
    } catch {
        replyError(req, error)
    }
}

func opFlush(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let fs = context(req).fs
    guard let f = openFile(fi) else { return replyError(req, .badFileDescriptor) }
    do throws(Errno) {
        // The kernel leaves dropping the closing process's POSIX locks to us.
        try fs.flush(f, lockOwner: cfuse_fi_flush(fi) != 0 ? fi!.pointee.lock_owner : nil)
        fuse_reply_err(req, 0)
    } catch {
        replyError(req, error)
    }
}

func opRelease(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let ctx = context(req)
    if let f = openFile(fi) {
        if f.noFlush { ctx.unreleased.remove(fi!.pointee.fh) }
        ctx.passthrough.released(f)
        // flock_release: the file held a flock; release() drops the open file's locks anyway
        // (and closing its backing descriptor drops the flock itself).
        closeOpenFile(ctx, f)
        fi!.pointee.fh = 0
    }
    fuse_reply_err(req, 0)
}

func opFsync(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ datasync: Int32, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let fs = context(req).fs
    guard let f = openFile(fi) else { return replyError(req, .badFileDescriptor) }
    do throws(Errno) {
        try fs.fsync(f, dataOnly: datasync != 0)
        fuse_reply_err(req, 0)
    } catch {
        replyError(req, error)
    }
}

func opFallocate(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ mode: Int32, _ offset: off_t, _ length: off_t,
                 _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let fs = context(req).fs
    guard let f = openFile(fi) else { return replyError(req, .badFileDescriptor) }
    do throws(Errno) {
        try fs.fallocate(f, mode: mode, offset: Int64(offset), length: Int64(length), caller: caller(req))
        fuse_reply_err(req, 0)
    } catch {
        replyError(req, error)
    }
}

func opLseek(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ off: off_t, _ whence: Int32, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let fs = context(req).fs
    guard let f = openFile(fi) else { return replyError(req, .badFileDescriptor) }
    do throws(Errno) {
        fuse_reply_lseek(req, off_t(try fs.lseek(f, offset: Int64(off), whence: whence)))
    } catch {
        replyError(req, error)
    }
}

func opCopyFileRange(_ req: fuse_req_t?, _ inoIn: fuse_ino_t, _ offIn: off_t, _ fiIn: UnsafeMutablePointer<fuse_file_info>?,
                     _ inoOut: fuse_ino_t, _ offOut: off_t, _ fiOut: UnsafeMutablePointer<fuse_file_info>?,
                     _ len: Int, _ flags: Int32) {
    let fs = context(req).fs
    guard let a = openFile(fiIn), let b = openFile(fiOut) else { return replyError(req, .badFileDescriptor) }
    do throws(Errno) {
        let n = try fs.copyFileRange(from: a, offsetIn: Int64(offIn), to: b, offsetOut: Int64(offOut), length: len, flags: UInt32(flags))
        fuse_reply_write(req, n)
    } catch {
        replyError(req, error)
    }
}
