// FileSystem+Lookup: finding names in folders (the top levels, the app views, backing folders), and the kernel's forgets.
import CDocDriveSys
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

extension DriveFileSystem {
    public func lookup(parent: UInt64, name: UnsafePointer<CChar>) throws(Errno) -> NodeEntry {
        if name.pointee == 0x2E, let e = try lookupDots(parent: parent, name: name) { return e }  // file handles
        let p = try node(parent)
        if strlen(name) > Names.maxNameBytes { throw .fileNameTooLong }
        switch p.kind {
        case .backing:
            return try lookupBacking(parent: p, name: name)
        case .root:
            let s = String(cString: name)
            if s == Self.byAppName {
                let n = try node(Self.byAppID)
                return NodeEntry(inode: n, attr: virtualAttr(n))
            }
            guard let root = namespace.current().topLevel[s] else { throw .noSuchFileOrDirectory }
            return try lookupTop(root, view: .unified)
        case .byApp:
            let s = String(cString: name)
            guard namespace.current().appFolders[s] != nil else { throw .noSuchFileOrDirectory }
            let n = appView(s)
            return NodeEntry(inode: n, attr: virtualAttr(n))
        case .appView:
            // The view folder's own view: every node below shares its app object.
            guard case .app(let app) = p.view else { throw .noSuchFileOrDirectory }
            let s = String(cString: name)
            guard let root = namespace.current().appFolders[app.id]?[s] else { throw .noSuchFileOrDirectory }
            return try lookupTop(root, view: p.view)
        }
    }

    func lookupTop(_ root: BackingRoot, view: View) throws(Errno) -> NodeEntry {
        let fd = try Sys.openPath(absolute: root.path)
        let st: stat
        do { st = try Sys.stat(fd: fd) } catch { Sys.close(fd); throw error }
        let inode = table.insertOrFind(fd: fd, st: st, root: root, view: view, isTopLevel: true)
        keepInKernel(inode, parent: nil, st)
        return NodeEntry(inode: inode, attr: st)
    }

    /// Looks `name` up in `parent`. A regular file with one link is only stat'ed: its node is
    /// opened on first use (most looked-up files are only stat'ed or listed, and the kernel
    /// forgets them again), which saves an open and a close per file. Folders, symlinks and
    /// files with several links are opened at once, and so is everything when `eager` (a file
    /// about to be opened). `type`: the entry's d_type when a listing gave it.
    func lookupBacking(parent: Inode, name: UnsafePointer<CChar>, eager: Bool = false,
                       type: UInt8 = UInt8(DT_UNKNOWN)) throws(Errno) -> NodeEntry {
        if ReservedNames.isReserved(name) { throw .noSuchFileOrDirectory }
        let pfd = try parent.acquire()
        defer { parent.release() }
        let fd: Int32
        do {
            if !eager, type == UInt8(DT_REG) || type == UInt8(DT_UNKNOWN) {
                let st = try Sys.stat(pfd, name)
                if st.st_mode & S_IFMT == S_IFREG, st.st_nlink == 1 {
                    let inode = table.insertOrFind(fd: -1, st: st, root: parent.root!, view: parent.view,
                                                   isTopLevel: false, lazy: Inode.LazyName(parent: parent, name))
                    keepInKernel(inode, parent: parent, st)
                    return NodeEntry(inode: inode, attr: st)
                }
            }
            fd = try Sys.openPath(pfd, name)
        } catch {
            // In an app's container, a name may be a reference entry (kept under a reserved name).
            if error == .noSuchFileOrDirectory, Self.isContainer(parent.root) {
                return try lookupReference(parent: parent, pfd: pfd, name: name)
            }
            throw error
        }
        let st: stat
        do { st = try Sys.stat(fd: fd) } catch { Sys.close(fd); throw error }
        let inode = table.insertOrFind(fd: fd, st: st, root: parent.root!, view: parent.view, isTopLevel: false)
        keepInKernel(inode, parent: parent, st)
        return NodeEntry(inode: inode, attr: st)
    }

    public func forget(_ id: UInt64, _ n: UInt64) {
        table.forget(id, n)
    }

    /// The kernel's BATCH_FORGET: up to hundreds of forgets under one hold of the table's lock.
    public func forget(_ forgets: some Collection<(UInt64, UInt64)>) {
        table.forget(forgets)
    }
}
