// XattrOps: FUSE callbacks for extended attributes.
import CFuse
import DocDriveCore
import SystemPackage

private func replyXattr(_ req: fuse_req_t?, _ value: [UInt8], size: Int) {
    if size == 0 {
        fuse_reply_xattr(req, value.count)
    } else {
        value.withUnsafeBytes { _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), value.count) }
    }
}

func opGetxattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ name: UnsafePointer<CChar>?, _ size: Int) {
    let fs = context(req).fs
    do throws(Errno) {
        replyXattr(req, try fs.getxattr(ino, name: name!, size: size), size: size)
    } catch {
        replyError(req, error)
    }
}

func opListxattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ size: Int) {
    let fs = context(req).fs
    do throws(Errno) {
        replyXattr(req, try fs.listxattr(ino, size: size), size: size)
    } catch {
        replyError(req, error)
    }
}

func opSetxattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ name: UnsafePointer<CChar>?, _ value: UnsafePointer<CChar>?,
                _ size: Int, _ flags: Int32) {
    let fs = context(req).fs
    do throws(Errno) {
        try fs.setxattr(ino, name: name!, value: UnsafeRawPointer(value), size: size, flags: flags, caller: caller(req))
        aclChanged(req, ino, name!)
        fuse_reply_err(req, 0)
    } catch {
        replyError(req, error)
    }
}

func opRemovexattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ name: UnsafePointer<CChar>?) {
    let fs = context(req).fs
    do throws(Errno) {
        try fs.removexattr(ino, name: name!)
        aclChanged(req, ino, name!)
        fuse_reply_err(req, 0)
    } catch {
        replyError(req, error)
    }
}

/// Setting or removing an access ACL changes the mode: where the kernel does not know ACLs (a
/// private mount, see opInit), its cached attributes are dropped before the caller hears back,
/// so the next stat shows the new mode. (Only the attributes: no folder lock is taken.)
private func aclChanged(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ name: UnsafePointer<CChar>) {
    let ctx = context(req)
    guard !ctx.kernelChecksPermissions, strcmp(name, "system.posix_acl_access") == 0 else { return }
    // The kernel cache's watch sees this change too: told first, it does not drop the kernel's
    // attributes again while the caller's next request fetches them (a reply that crosses an
    // invalidation is discarded, and an exec's permission check then used the old mode).
    ctx.fs.noteToldNow(ino)
    ctx.invalidateAttributes(ino)
}
