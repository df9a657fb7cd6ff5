// FileSystem+Handles: the lookups of "." and ".." by which the kernel turns a file handle back into a node (NFS export, open_by_handle_at).
import CDocDriveSys
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// A file handle of the mount is a node id and a generation (always 0: node ids are never given
/// to another file). While the kernel still holds the node it needs nothing from us; once it
/// has forgotten it, it sends LOOKUP(id, ".") and expects that very node back, and to connect a
/// folder to the tree it sends LOOKUP(id, "..") (fs/fuse/inode.c, fuse_get_dentry and
/// fuse_get_parent, with FUSE_CAP_EXPORT_SUPPORT). The inode table remembers forgotten nodes
/// for this (InodeTable.Remembered).
extension DriveFileSystem {
    /// The node for "." or ".." of `parent`; nil for any other name starting with a dot.
    func lookupDots(parent: UInt64, name: UnsafePointer<CChar>) throws(Errno) -> NodeEntry? {
        if name[1] == 0 { return try lookupSelf(parent) }
        if name[1] == 0x2E, name[2] == 0 { return try lookupParent(parent) }
        return nil
    }

    /// The node `id` itself, brought back if the kernel forgot it; one lookup counted.
    func lookupSelf(_ id: UInt64) throws(Errno) -> NodeEntry {
        if let n = table.get(id) {
            guard n.kind == .backing else { return NodeEntry(inode: n, attr: virtualAttr(n)) }
            let st = try getattr(id)
            // The kernel's forget of it may be on its way: then it is brought back below.
            if table.addLookup(n) { return NodeEntry(inode: n, attr: st) }
        }
        let (n, st) = try table.revive(id)
        return NodeEntry(inode: n, attr: st)
    }

    /// The folder that holds the folder `id` (the kernel asks only for folders), in the same view.
    func lookupParent(_ id: UInt64) throws(Errno) -> NodeEntry {
        let n = try node(id)
        let up: Inode
        switch n.kind {
        case .root, .byApp:
            up = try node(Self.rootID)
        case .appView:
            up = try node(Self.byAppID)
        case .backing:
            guard n.isDirectory else { throw .notDirectory }
            guard !n.isTopLevel else {
                switch n.view {
                case .unified: up = try node(Self.rootID)
                case .app(let app): up = appView(app.id)
                }
                break
            }
            return try lookupBackingParent(n)
        }
        return NodeEntry(inode: up, attr: virtualAttr(up))
    }

    /// ".." of a backing folder below the top: the top-level folder itself is looked up as such.
    private func lookupBackingParent(_ n: Inode) throws(Errno) -> NodeEntry {
        guard let root = n.root else { throw .staleNFSFileHandle }
        let nfd = try n.acquire()
        defer { n.release() }
        let pfd = try Sys.check { openat(nfd, "..", Sys.O_PATH | Sys.O_DIRECTORY | Sys.O_CLOEXEC) }
        let st: stat
        do { st = try Sys.stat(fd: pfd) } catch { Sys.close(pfd); throw error }
        var top = stat()
        if dd_stat(root.path, &top) == 0, top.st_dev == st.st_dev, top.st_ino == st.st_ino {
            Sys.close(pfd)
            return try lookupTop(root, view: n.view)
        }
        let inode = table.insertOrFind(fd: pfd, st: st, root: root, view: n.view, isTopLevel: false)
        return NodeEntry(inode: inode, attr: st)
    }
}
