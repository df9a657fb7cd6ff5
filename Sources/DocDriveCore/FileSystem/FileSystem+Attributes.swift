// FileSystem+Attributes: getattr, access, setattr (mode, owner, size, times) and readlink; the attributes of virtual nodes.
import CDocDriveSys
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// Which attributes a setattr changes.
public struct AttributeChanges: Sendable {
    public enum Time: Sendable {
        case now
        case at(timespec)
    }
    public var mode: mode_t?
    public var uid: uid_t?
    public var gid: gid_t?
    public var size: Int64?
    public var atime: Time?
    public var mtime: Time?
    /// The kernel asks the drive to drop setuid/setgid with this size change (a caller without
    /// CAP_FSETID truncates; FUSE_HANDLE_KILLPRIV_V2, see `dropsSetIDBits`).
    public var killsSetID = false
    public init() {}
}

extension DriveFileSystem {
    func virtualAttr(_ n: Inode) -> stat {
        var st = stat()
        st.st_ino = __ino_t(0x7fff_ffff_0000_0000 | n.nodeID)
        if n.nodeID == Self.rootID { st.st_ino = 1 }
        st.st_mode = S_IFDIR | 0o555
        // 2 + subfolders, as on a native filesystem (find's leaf optimisation relies on it).
        switch n.kind {
        case .root: st.st_nlink = __nlink_t(3 + namespace.current().topLevelOrder.count)
        case .byApp: st.st_nlink = __nlink_t(2 + namespace.current().config.apps.count)
        case .appView: st.st_nlink = __nlink_t(2 + Namespace.appFolderNames.count)
        case .backing: st.st_nlink = 2
        }
        st.st_uid = daemonUID
        st.st_gid = daemonGID
        st.st_blksize = 4096
        st.st_atim = mountTime
        st.st_mtim = mountTime
        st.st_ctim = mountTime
        return st
    }

    public func getattr(_ id: UInt64) throws(Errno) -> stat {
        try getattr(node: try node(id))
    }

    func getattr(node n: Inode) throws(Errno) -> stat {
        guard n.kind == .backing else { return virtualAttr(n) }
        if n.reference != nil { return try referenceAttr(n) }
        if let st = n.statUnopened() { return st }
        let nfd = try n.acquire()
        defer { n.release() }
        return try Sys.stat(fd: nfd)
    }

    /// access(2) and chdir on a private mount, where the kernel leaves permission checks to the
    /// drive: the caller is the daemon's own user, so the backing file answers for the daemon's
    /// credentials (its mode, ACLs and read-only mounts). The drive's own levels are read-only.
    public func access(_ id: UInt64, mask: Int32) throws(Errno) {
        let n = try node(id)
        guard n.kind == .backing else {
            if mask & W_OK != 0 { throw .permissionDenied }
            return
        }
        let (nfd, _) = try acquireContent(n)
        defer { n.release() }
        _ = try Sys.check { dd_access_fd(nfd, mask) }
    }

    /// `caller`: who asks (a chmod by someone not in the file's group drops setgid, as natively).
    public func setattr(_ id: UInt64, _ c: AttributeChanges, file: OpenFile?, caller: Caller? = nil) throws(Errno) -> stat {
        try setattr(node: try backing(id), c, file: file, caller: caller)
    }

    func setattr(node n: Inode, _ c: AttributeChanges, file: OpenFile?, caller: Caller?) throws(Errno) -> stat {
        let (nfd, contentRoot) = try acquireContent(n)
        defer { n.release() }
        let fd = file?.fd
        if var mode = c.mode {
            if n.isSymlink { throw .notSupported }
            if mode & S_ISGID != 0, let caller, !caller.keepsPrivilegeBits {
                let group = if let g = c.gid { g } else { try Sys.stat(fd: nfd).st_gid }
                if !PrivilegeBits.chmodKeepsSetgid(caller, fileGroup: group) { mode &= ~S_ISGID }
            }
            if let fd { _ = try Sys.check { fchmod(fd, mode) } } else { _ = try Sys.check { dd_fchmod_path(nfd, mode) } }
        }
        if c.uid != nil || c.gid != nil {
            let uid = c.uid ?? uid_t.max, gid = c.gid ?? gid_t.max
            _ = try Sys.check { fchownat(nfd, "", uid, gid, Sys.AT_EMPTY_PATH | Sys.AT_SYMLINK_NOFOLLOW) }
        }
        if let size = c.size {
            if n.isDirectory { throw .isDirectory }
            // A placeholder (Sync/Placeholder.swift) truncated to nothing is an empty file of the
            // user's; cut to another size it needs its content first, which the FUSE layer
            // fills before it calls this (`placeholderToFill`): one still here is EIO.
            if file == nil, n.fileType == S_IFREG, Placeholder.version(fd: nfd) != nil {
                guard size == 0 else { throw .ioError }
                // Not while it is being downloaded (ahead, or for a reader): the download would
                // write over the user's file. `placeholderToFill` made the request wait for one
                // going on; one that began since fails this truncate (EIO), nothing else.
                let clear = { _ = dd_removexattr_path(nfd, Placeholder.attribute) }
                if let root = contentRoot ?? n.root, root.isStore,
                   let path = storePath(fd: nfd, root: root), !path.isEmpty {
                    guard sync.onDemand.takePlaceholder(root: root.key, path: path, clear) else { throw .ioError }
                } else {
                    clear()
                }
            } else if file == nil, n.fileType == S_IFREG, let root = contentRoot ?? n.root,
                      root.isStore, case .filled = Placeholder.mark(fd: nfd) {
                // Filled in this boot: durable before the user's truncate (Sync/FillCommits.swift).
                let rfd = try Sys.check { dd_reopen(nfd, O_RDONLY | O_CLOEXEC) }
                defer { Sys.close(rfd) }
                guard settleFill(sync, root: root, fd: rfd) else { throw .ioError }
            }
            defer {
                if let file { file.dirty.store(true, ordering: .relaxed) } else if let root = contentRoot { publish(.truncated(fd: nfd, root: root)) }
            }
            if let fd { _ = try Sys.check { ftruncate(fd, off_t(size)) } } else { _ = try Sys.check { dd_truncate_path(nfd, off_t(size)) } }
            if c.killsSetID { dropPrivilegeBitsForModification(nodeFD: nfd, caller: caller) }
        }
        if c.atime != nil || c.mtime != nil {
            func ts(_ t: AttributeChanges.Time?) -> timespec {
                switch t {
                case .none: return timespec(tv_sec: 0, tv_nsec: dd_UTIME_OMIT)
                case .now: return timespec(tv_sec: 0, tv_nsec: dd_UTIME_NOW)
                case .at(let v): return v
                }
            }
            var times = [ts(c.atime), ts(c.mtime)]
            if let fd {
                _ = try Sys.check { futimens(fd, &times) }
            } else {
                _ = try Sys.check { dd_utimensat_fd(nfd, &times, n.isSymlink ? 1 : 0) }
            }
        }
        return try Sys.stat(fd: nfd)
    }

    public func readlink(_ id: UInt64) throws(Errno) -> [UInt8] {
        let n = try backing(id)
        let nfd = try n.acquire()
        defer { n.release() }
        var buf = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let len = try Sys.check { buf.withUnsafeMutableBufferPointer { readlinkat(nfd, "", $0.baseAddress!, $0.count) } }
        return Array(buf[0..<len])
    }
}
