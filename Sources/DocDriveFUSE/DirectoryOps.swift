// DirectoryOps: FUSE callbacks for folders (opendir, readdir, readdirplus, releasedir, fsyncdir).
import CFuse
import DocDriveCore
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

func opOpendir(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let ctx = context(req)
    let fs = ctx.fs
    do throws(Errno) {
        let d = try fs.opendir(ino)
        fi!.pointee.fh = handleValue(d)
        if ino == 1 { ctx.releases.opened(ino, by: caller(req).pid, handle: fi!.pointee.fh) }  // FUSE_ROOT_ID
        // The kernel's cache of the listing, and whether what it holds is still true (the core
        // decides: FileSystem+Directories).
        cfuse_fi_set_dir_flags(fi, d.cacheListing ? 1 : 0, d.keepListing ? 1 : 0)
        if fuse_reply_open(req, fi) != 0 {
            fs.releasedir(d)
            Unmanaged.passUnretained(d).release()
        }
    } catch {
        replyError(req, error)
    }
}

private func readDirectory(_ req: fuse_req_t?, _ size: Int, _ off: off_t, _ fi: UnsafeMutablePointer<fuse_file_info>?, plus: Bool) {
    let fs = context(req).fs
    guard let d = directoryStream(fi) else { return replyError(req, .badFileDescriptor) }
    let buf = UnsafeMutablePointer<CChar>.allocate(capacity: size)
    defer { buf.deallocate() }
    var used = 0
    do throws(Errno) {
        try fs.readdir(d, offset: Int64(off), plus: plus) { name, item, next in
            let room = size - used
            let needed: Int
            if plus {
                var p = fuse_entry_param()
                if let e = item.entry {
                    p = entryParam(e, fs)
                } else {
                    p.attr.st_ino = __ino_t(item.ino)
                    p.attr.st_mode = item.mode
                }
                needed = fuse_add_direntry_plus(req, buf + used, room, name, &p, off_t(next))
            } else {
                var st = stat()
                st.st_ino = __ino_t(item.ino)
                st.st_mode = item.mode
                needed = fuse_add_direntry(req, buf + used, room, name, &st, off_t(next))
            }
            if needed > room { return false }
            used += needed
            return true
        }
        fuse_reply_buf(req, buf, used)
    } catch {
        // Entries already added would be lost: hand out what we have, the error shows next time.
        if used > 0 { fuse_reply_buf(req, buf, used) } else { replyError(req, error) }
    }
}

func opReaddir(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ size: Int, _ off: off_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    readDirectory(req, size, off, fi, plus: false)
}

func opReaddirplus(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ size: Int, _ off: off_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    readDirectory(req, size, off, fi, plus: true)
}

func opReleasedir(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let ctx = context(req)
    let fs = ctx.fs
    if let fi { ctx.releases.released(handle: fi.pointee.fh) }
    if let d = directoryStream(fi) {
        fs.releasedir(d)
        Unmanaged.passUnretained(d).release()
        fi!.pointee.fh = 0
    }
    fuse_reply_err(req, 0)
}

func opFsyncdir(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ datasync: Int32, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
    let fs = context(req).fs
    guard let d = directoryStream(fi) else { return replyError(req, .badFileDescriptor) }
    do throws(Errno) {
        try fs.fsyncdir(d, dataOnly: datasync != 0)
        fuse_reply_err(req, 0)
    } catch {
        replyError(req, error)
    }
}
