// LockOps: FUSE callbacks for advisory locks (getlk, setlk, flock); the core holds them on the backing files.
import CFuse
import DocDriveCore
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// libfuse's struct flock (l_whence is always SEEK_SET, l_len 0 reaches the end) in the core's terms.
@inline(__always)
private func recordLock(_ l: UnsafeMutablePointer<flock>, pid: pid_t) -> RecordLock {
    RecordLock(type: Int16(l.pointee.l_type), start: Int64(l.pointee.l_start), length: Int64(l.pointee.l_len), pid: pid)
}

func opGetlk(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?,
             _ lock: UnsafeMutablePointer<flock>?) {
    let fs = context(req).fs
    guard let fi, let lock else { return replyError(req, .invalidArgument) }
    do throws(Errno) {
        let held = try fs.getLock(ino, owner: fi.pointee.lock_owner, recordLock(lock, pid: caller(req).pid))
        lock.pointee.l_type = held.type
        lock.pointee.l_whence = Int16(SEEK_SET)
        lock.pointee.l_start = off_t(held.start)
        lock.pointee.l_len = off_t(held.length)
        lock.pointee.l_pid = held.pid  // the kernel maps it into the asking process's namespace
        fuse_reply_lock(req, lock)
    } catch {
        replyError(req, error)
    }
}

func opSetlk(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?,
             _ lock: UnsafeMutablePointer<flock>?, _ sleep: Int32) {
    let fs = context(req).fs
    guard let fi, let lock else { return replyError(req, .invalidArgument) }
    do throws(Errno) {
        try fs.setLock(ino, owner: fi.pointee.lock_owner, recordLock(lock, pid: caller(req).pid),
                       file: openFile(fi), wait: sleep != 0,
                       isInterrupted: { fuse_req_interrupted(req) != 0 })
        fuse_reply_err(req, 0)
    } catch {
        replyError(req, error)
    }
}

func opFlock(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?, _ op: Int32) {
    let fs = context(req).fs
    guard let f = openFile(fi) else { return replyError(req, .badFileDescriptor) }
    do throws(Errno) {
        try fs.flock(f, operation: op, pid: caller(req).pid, isInterrupted: { fuse_req_interrupted(req) != 0 })
        fuse_reply_err(req, 0)
    } catch {
        replyError(req, error)
    }
}
