// Operations: the one function that fills libfuse's low-level operation table.
import CFuseTransport
import CFuse

/// Called on libfuse's thread once the kernel has sent INIT: choose capabilities.
func opInit(_ userdata: UnsafeMutableRawPointer?, _ conn: UnsafeMutablePointer<fuse_conn_info>?) {
    let ctx = Unmanaged<FuseContext>.fromOpaque(userdata!).takeUnretainedValue()
    let conn = conn!
    if ctx.fs.options.writebackCache { cfuse_conn_enable(conn, UInt32(FUSE_CAP_WRITEBACK_CACHE)) }
    cfuse_conn_enable(conn, UInt32(FUSE_CAP_PARALLEL_DIROPS))
    cfuse_conn_enable(conn, UInt32(FUSE_CAP_ASYNC_READ))
    cfuse_conn_enable(conn, UInt32(FUSE_CAP_AUTO_INVAL_DATA))
    cfuse_conn_enable(conn, UInt32(FUSE_CAP_READDIRPLUS))
    cfuse_conn_enable(conn, UInt32(FUSE_CAP_READDIRPLUS_AUTO))
    cfuse_conn_enable(conn, UInt32(FUSE_CAP_ASYNC_DIO))
    cfuse_conn_enable(conn, UInt32(FUSE_CAP_ATOMIC_O_TRUNC))
    // File handles (open_by_handle_at, an NFS export) outlive the kernel's cache: it then looks
    // the node up by id as "." (and a folder's parent as ".."), see FileSystem+Handles.
    cfuse_conn_enable(conn, UInt32(FUSE_CAP_EXPORT_SUPPORT))
    // Reads are answered from the backing descriptor: splice moves the pages into /dev/fuse
    // instead of copying them through a buffer.
    cfuse_conn_enable(conn, UInt32(FUSE_CAP_SPLICE_WRITE))
    cfuse_conn_enable(conn, UInt32(FUSE_CAP_SPLICE_MOVE))
    // POSIX ACLs live on the backing files (their xattrs pass through). Where the kernel checks
    // permissions (a shared mount), it must enforce them too and drop its cached mode when one
    // is set, or an ACL that denies a user what "other" may do would be ignored. The kernel
    // turns default_permissions on with this, so a private mount, where the backing files check
    // (see MountCommand.mountOptions), goes without it and drops the mode itself (XattrOps).
    if ctx.kernelChecksPermissions { cfuse_conn_enable(conn, UInt32(FUSE_CAP_POSIX_ACL)) }
    // ...and a folder's default ACL replaces the umask: the backing filesystem decides, so the
    // kernel passes the umask on (the core applies it as the creating thread's own umask).
    cfuse_conn_enable(conn, UInt32(FUSE_CAP_DONT_MASK))
    dontMask.store(conn.pointee.want & UInt32(FUSE_CAP_DONT_MASK) != 0, ordering: .relaxed)
    // Not the first version: with it the kernel leaves dropping setuid/setgid to us and still
    // asks for security.capability before every write.
    cfuse_conn_disable(conn, UInt32(FUSE_CAP_HANDLE_KILLPRIV))
    // The second version (libfuse 3.14 cannot ask for it; our I/O functions add it to the
    // reply): the kernel stops asking for security.capability before every write() (a round
    // trip per 4 KiB written by sqlite, a log, a compiler), and a request of a caller without
    // CAP_FSETID tells us to drop setuid/setgid, which the backing file system would not do
    // for us, who run as root (FileSystem+Setgid). Writes passed through to the
    // backing file never come here: `writesNeedTheDrive` sends the writable opens that could need
    // it through the drive.
    let killpriv = dd_fuse_want_killpriv_v2() != 0
    ctx.fs.dropsSetIDBits.store(killpriv, ordering: .relaxed)
    // libfuse asked for POSIX and flock locks because the lock operations are set: keep them.
    let lockCaps = UInt32(FUSE_CAP_POSIX_LOCKS) | UInt32(FUSE_CAP_FLOCK_LOCKS)
    if conn.pointee.want & lockCaps != lockCaps {
        ctx.logger.warning("the kernel does not pass locks on (capable \(conn.pointee.capable & lockCaps), want \(conn.pointee.want & lockCaps)): they stay local to this machine's kernel")
    }
    let passthrough = ctx.passthrough.negotiate()
    if passthrough || killpriv { dd_fuse_mark_reply(Int32(DD_REPLY_INIT.rawValue), passthrough ? 1 : 0) }
    ctx.logger.info("kernel connection ready: protocol \(conn.pointee.proto_major).\(conn.pointee.proto_minor), max_write \(conn.pointee.max_write), locks \(conn.pointee.want & lockCaps == lockCaps ? "served by the drive" : "kernel-local"), file I/O \(ctx.passthrough.isEnabled ? "passed through to the backing files" : "through the drive"), setuid/setgid dropped by \(killpriv ? "the drive" : "the kernel")")
    ctx.onReady(ctx.passthrough.isEnabled)
}

func makeOperations() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()
    ops.`init` = opInit
    ops.lookup = opLookup
    ops.forget = opForget
    ops.forget_multi = opForgetMulti
    ops.getattr = opGetattr
    ops.access = opAccess
    ops.setattr = opSetattr
    ops.readlink = opReadlink
    ops.mknod = opMknod
    ops.mkdir = opMkdir
    ops.symlink = opSymlink
    ops.link = opLink
    ops.unlink = opUnlink
    ops.rmdir = opRmdir
    ops.rename = opRename
    ops.open = opOpen
    ops.create = opCreate
    ops.read = opRead
    ops.write = opWrite
    ops.flush = opFlush
    ops.release = opRelease
    ops.fsync = opFsync
    ops.fallocate = opFallocate
    ops.lseek = opLseek
    ops.copy_file_range = opCopyFileRange
    ops.opendir = opOpendir
    ops.readdir = opReaddir
    ops.readdirplus = opReaddirplus
    ops.releasedir = opReleasedir
    ops.fsyncdir = opFsyncdir
    ops.statfs = opStatfs
    ops.getxattr = opGetxattr
    ops.listxattr = opListxattr
    ops.setxattr = opSetxattr
    ops.removexattr = opRemovexattr
    ops.getlk = opGetlk
    ops.setlk = opSetlk
    ops.flock = opFlock
    return ops
}
