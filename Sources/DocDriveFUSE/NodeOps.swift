// NodeOps: FUSE callbacks for names and attributes (lookup, forget, getattr/setattr, create, remove, rename).
import CFuseTransport
import CFuse
import DocDriveCore
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

func opLookup(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?) {
    let fs = context(req).fs
    do throws(Errno) {
        replyEntry(req, try fs.lookup(parent: parent, name: name!), fs)
    } catch {
        replyError(req, error)
    }
}

func opForget(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ n: UInt64) {
    context(req).fs.forget(ino, n)
    fuse_reply_none(req)
}

func opForgetMulti(_ req: fuse_req_t?, _ count: Int, _ forgets: UnsafeMutablePointer<fuse_forget_data>?) {
    let batch = UnsafeBufferPointer(start: forgets, count: count).lazy.map { ($0.ino, $0.nlookup) }
    context(req).fs.forget(batch)
    fuse_reply_none(req)
}

func opGetattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let fs = context(req).fs
    do throws(Errno) {
        var (st, timeout) = try fs.kernelAttributes(ino)
        fuse_reply_attr(req, &st, timeout)
    } catch {
        replyError(req, error)
    }
}

/// Sent only on a private mount (no default_permissions): access(2) and chdir.
func opAccess(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ mask: Int32) {
    do throws(Errno) {
        try context(req).fs.access(ino, mask: mask)
        fuse_reply_err(req, 0)
    } catch {
        replyError(req, error)
    }
}

func opSetattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ attr: UnsafeMutablePointer<stat>?, _ toSet: Int32,
               _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let fs = context(req).fs
    let a = attr!.pointee
    var c = AttributeChanges()
    if toSet & FUSE_SET_ATTR_MODE != 0 { c.mode = a.st_mode }
    if toSet & FUSE_SET_ATTR_UID != 0 { c.uid = a.st_uid }
    if toSet & FUSE_SET_ATTR_GID != 0 { c.gid = a.st_gid }
    if toSet & FUSE_SET_ATTR_SIZE != 0 {
        c.size = Int64(a.st_size)
        c.killsSetID = dd_fuse_request_kills_suidgid() != 0  // FATTR_KILL_SUIDGID of this request
    }
    if toSet & FUSE_SET_ATTR_ATIME_NOW != 0 { c.atime = .now } else if toSet & FUSE_SET_ATTR_ATIME != 0 { c.atime = .at(a.st_atim) }
    if toSet & FUSE_SET_ATTR_MTIME_NOW != 0 { c.mtime = .now } else if toSet & FUSE_SET_ATTR_MTIME != 0 { c.mtime = .at(a.st_mtim) }
    let who = caller(req)
    // truncate(2) of a placeholder to a size but 0: its content first, downloaded on another
    // thread (as an open does), and the reply sent from there.
    if let (root, path) = fs.placeholderToFill(ino, size: c.size, file: openFile(fi)) {
        let pending = PendingRequest(req: req)
        let ctx = context(req)
        fs.fill(root: root, path: path) { [c] failure in
            if let failure { return replyError(pending.req, failure) }
            ctx.invalidateAttributes(ino)
            do throws(Errno) {
                var (st, timeout) = try fs.kernelSetattr(ino, c, file: nil, caller: who)
                fuse_reply_attr(pending.req, &st, timeout)
            } catch {
                replyError(pending.req, error)
            }
        }
        return
    }
    do throws(Errno) {
        var (st, timeout) = try fs.kernelSetattr(ino, c, file: openFile(fi), caller: who)
        fuse_reply_attr(req, &st, timeout)
    } catch {
        replyError(req, error)
    }
}

/// A request answered from another thread once a placeholder's content is here (libfuse lets
/// a request be answered once, from anywhere).
struct PendingRequest: @unchecked Sendable {
    let req: fuse_req_t?
}

func opReadlink(_ req: fuse_req_t?, _ ino: fuse_ino_t) {
    let fs = context(req).fs
    do throws(Errno) {
        var target = try fs.readlink(ino)
        target.append(0)
        target.withUnsafeBufferPointer { b in
            b.withMemoryRebound(to: CChar.self) { _ = fuse_reply_readlink(req, $0.baseAddress) }
        }
    } catch {
        replyError(req, error)
    }
}

func opMknod(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?, _ mode: mode_t, _ rdev: dev_t) {
    let fs = context(req).fs
    do throws(Errno) {
        replyEntry(req, try fs.mknod(parent: parent, name: name!, mode: mode, rdev: rdev, caller: caller(req)), fs)
    } catch {
        replyError(req, error)
    }
}

func opMkdir(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?, _ mode: mode_t) {
    let fs = context(req).fs
    do throws(Errno) {
        replyEntry(req, try fs.mkdir(parent: parent, name: name!, mode: mode, caller: caller(req)), fs)
    } catch {
        replyError(req, error)
    }
}

func opSymlink(_ req: fuse_req_t?, _ link: UnsafePointer<CChar>?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?) {
    let fs = context(req).fs
    do throws(Errno) {
        replyEntry(req, try fs.symlink(target: link!, parent: parent, name: name!, caller: caller(req)), fs)
    } catch {
        replyError(req, error)
    }
}

func opLink(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ newParent: fuse_ino_t, _ newName: UnsafePointer<CChar>?) {
    let fs = context(req).fs
    do throws(Errno) {
        replyEntry(req, try fs.link(ino, newParent: newParent, newName: newName!), fs)
    } catch {
        replyError(req, error)
    }
}

func opUnlink(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?) {
    let fs = context(req).fs
    do throws(Errno) {
        try fs.unlink(parent: parent, name: name!)
        fuse_reply_err(req, 0)
    } catch {
        replyError(req, error)
    }
}

func opRmdir(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?) {
    let fs = context(req).fs
    do throws(Errno) {
        try fs.rmdir(parent: parent, name: name!)
        fuse_reply_err(req, 0)
    } catch {
        replyError(req, error)
    }
}

func opRename(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>?, _ newParent: fuse_ino_t,
              _ newName: UnsafePointer<CChar>?, _ flags: UInt32) {
    let fs = context(req).fs
    do throws(Errno) {
        try fs.rename(parent: parent, name: name!, newParent: newParent, newName: newName!, flags: flags)
        fuse_reply_err(req, 0)
    } catch {
        replyError(req, error)
    }
}

func opStatfs(_ req: fuse_req_t?, _ ino: fuse_ino_t) {
    let fs = context(req).fs
    do throws(Errno) {
        var sv = try fs.statfs(ino)
        fuse_reply_statfs(req, &sv)
    } catch {
        replyError(req, error)
    }
}
