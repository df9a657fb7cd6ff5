// FileSystem+Create: mknod, mkdir, symlink, link and create, each handing the new item to its caller.
import CDocDriveSys
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

extension DriveFileSystem {
    /// After creating as the daemon, hands the new item to the caller (only when the daemon is
    /// root and the caller is someone else). A folder with setgid keeps its group for the child.
    /// Returns true when it changed the owner.
    private func giveToCaller(parent: Inode, name: UnsafePointer<CChar>, _ caller: Caller) throws(Errno) -> Bool {
        guard daemonUID == 0, caller.uid != 0 || caller.gid != 0 else { return false }
        let pfd = try parent.acquire()
        defer { parent.release() }
        var gid = caller.gid
        if let pst = try? Sys.stat(fd: pfd), pst.st_mode & S_ISGID != 0 { gid = gid_t.max }
        _ = try Sys.check { fchownat(pfd, name, caller.uid, gid, Sys.AT_SYMLINK_NOFOLLOW) }
        return true
    }

    /// `mode`: the mode the kernel asked for (umask and setgid rules already applied by it).
    /// `reclaiming`: the file renamed away from `name` a moment ago, whose item the new file
    /// continues (an editor's rename-away save).
    private func created(parent: Inode, name: UnsafePointer<CChar>, _ caller: Caller, kind: ItemKind,
                         mode: mode_t = 0, reclaiming: UInt64? = nil) throws(Errno) -> NodeEntry {
        let chowned: Bool
        do {
            chowned = try giveToCaller(parent: parent, name: name, caller)
        } catch {
            if let pfd = try? parent.acquire() {
                _ = unlinkat(pfd, name, kind == .directory ? Sys.AT_REMOVEDIR : 0)
                parent.release()
            }
            throw error
        }
        var e = try lookupBacking(parent: parent, name: name, eager: kind == .file)
        // chown cleared the setuid/setgid bits the caller asked for on its own new file (a
        // native create by the caller keeps them): put them back, on the node, never by name.
        let special = mode & (S_ISUID | S_ISGID)
        if chowned, special != 0, kind != .directory, kind != .symlink, e.attr.st_mode & special != special {
            let efd = try e.inode.acquire()
            defer { e.inode.release() }
            _ = try Sys.check { dd_fchmod_path(efd, (e.attr.st_mode & 0o1777) | special) }
            e.attr = try Sys.stat(fd: efd)
        }
        publish(.created(parent: parent, name: name, ino: UInt64(e.attr.st_ino), kind: kind, reclaiming: reclaiming))
        return e
    }

    /// Runs a creating call under the caller's umask (this thread's own, see dd_thread_umask).
    /// `body` gets the mode to pass: masked here only if the thread's umask cannot be set.
    /// The umask goes back to 0 afterwards: threads this one starts (libfuse's next worker, a
    /// download's, the dispatch pool's) share its umask until they take their own, and the
    /// daemon's other threads make their files with modes that must not be masked.
    private func withCallerUmask<T>(_ caller: Caller, _ mode: mode_t, _ body: (mode_t) throws(Errno) -> T) throws(Errno) -> T {
        let mask = caller.umask ?? 0
        guard dd_thread_umask(mask) >= 0 else { return try body(mode & ~(mask & 0o777)) }
        defer { _ = dd_thread_umask(0) }
        return try body(mode)
    }

    /// A name a request wants to create: too long, or reserved for the drive (references).
    @inline(__always)
    func checkName(_ name: UnsafePointer<CChar>) throws(Errno) {
        let len = strlen(name)
        if len > Names.maxNameBytes { throw .fileNameTooLong }
        if ReservedNames.isReserved(name, length: len) { throw .invalidArgument }
    }

    public func mknod(parent: UInt64, name: UnsafePointer<CChar>, mode: mode_t, rdev: dev_t, caller: Caller) throws(Errno) -> NodeEntry {
        let p = try writableParent(parent)
        try checkName(name)
        let pfd = try p.acquire()
        defer { p.release() }
        _ = try withCallerUmask(caller, mode) { (m) throws(Errno) in try Sys.check { mknodat(pfd, name, m, rdev) } }
        return try created(parent: p, name: name, caller, kind: (mode & S_IFMT) == S_IFREG ? .file : .other, mode: mode)
    }

    public func mkdir(parent: UInt64, name: UnsafePointer<CChar>, mode: mode_t, caller: Caller) throws(Errno) -> NodeEntry {
        let p = try writableParent(parent)
        try checkName(name)
        let pfd = try p.acquire()
        defer { p.release() }
        _ = try withCallerUmask(caller, mode) { (m) throws(Errno) in try Sys.check { mkdirat(pfd, name, m) } }
        return try created(parent: p, name: name, caller, kind: .directory)
    }

    public func symlink(target: UnsafePointer<CChar>, parent: UInt64, name: UnsafePointer<CChar>, caller: Caller) throws(Errno) -> NodeEntry {
        let p = try writableParent(parent)
        try checkName(name)
        let pfd = try p.acquire()
        defer { p.release() }
        _ = try Sys.check { symlinkat(target, pfd, name) }
        return try created(parent: p, name: name, caller, kind: .symlink)
    }

    public func link(_ id: UInt64, newParent: UInt64, newName: UnsafePointer<CChar>) throws(Errno) -> NodeEntry {
        let n = try backing(id)
        let p = try writableParent(newParent)
        try checkName(newName)
        // Another top-level folder, or the same one seen through another view (.by-app/ID/...):
        // a folder must never get a second parent in the kernel.
        if n.root !== p.root || n.view != p.view { throw .improperLink }
        if n.isDirectory || n.reference != nil { throw .notPermitted }
        let nfd = try n.acquire()
        defer { n.release() }
        let pfd = try p.acquire()
        defer { p.release() }
        _ = try Sys.check { dd_linkat_path(nfd, pfd, newName) }
        publish(.linked(parent: p, name: newName))
        return try lookupBacking(parent: p, name: newName)
    }

    /// Creates and opens a file. `noFlush`: the kernel will send no FLUSH for this open (the
    /// adapter asks for it when it can wait for queued releases, `setReleaseBarrier`); taken
    /// only for a file this call made, not for an existing one or a save through a reference.
    public func create(parent: UInt64, name: UnsafePointer<CChar>, mode: mode_t, flags: Int32, caller: Caller,
                       noFlush: Bool = false) throws(Errno) -> (NodeEntry, OpenFile) {
        let p = try writableParent(parent)
        try checkName(name)
        let (f, direct) = backingOpenFlags(flags)
        let pfd = try p.acquire()
        defer { p.release() }
        // An editor's rename-away save (`name` -> `name~`, then `name` again): the same document.
        let former = vacatedFor(create: p, name: name)
        if case .reference(let token) = former,
           let saved = createThroughReference(parent: p, pfd: pfd, name: name, token: token, flags: flags, caller: caller) {
            return saved
        }
        // Always exclusive: only a file this call made is handed to the caller (chown). If one
        // appeared since the kernel's lookup (made behind the mount's back) and the caller did
        // not ask for O_EXCL, open it as it is, like a native open(O_CREAT) would.
        let fd: Int32
        do throws(Errno) {
            fd = try withCallerUmask(caller, mode) { (m) throws(Errno) in
                try Sys.check { openat(pfd, name, f | O_CREAT | O_EXCL | Sys.O_NOFOLLOW | Sys.O_CLOEXEC, m) }
            }
        } catch {
            guard error == .fileExists, flags & O_EXCL == 0 else { throw error }
            let existing = try Sys.check { openat(pfd, name, f | Sys.O_NOFOLLOW | Sys.O_CLOEXEC) }
            do throws(Errno) {
                let e = try lookupBacking(parent: p, name: name, eager: true)
                let version = (try? Sys.stat(fd: existing)).map(FileVersion.init)
                return (e, OpenFile(fd: existing, inode: e.inode, flags: flags, version: version, directIO: direct, keepCache: false, openFiles: openFiles))
            } catch {
                Sys.close(existing)
                throw error
            }
        }
        do {
            var reclaiming: UInt64?
            if case .file(let ino) = former { reclaiming = ino }
            let e = try created(parent: p, name: name, caller, kind: .file, mode: mode, reclaiming: reclaiming)
            e.inode.cachedVersion.withLock { $0 = FileVersion(e.attr) }
            // A file made just now has no file capability (none is inherited): the kernel's look
            // for one before the first write is answered without a getxattr of the backing file.
            e.inode.hasNoCapability.store(true, ordering: .relaxed)
            let f = OpenFile(fd: fd, inode: e.inode, flags: flags, version: FileVersion(e.attr), directIO: direct, keepCache: false,
                             noFlush: noFlush, openFiles: openFiles)
            f.dirty.store(true, ordering: .relaxed)  // a new file, even empty, is a save
            return (e, f)
        } catch {
            Sys.close(fd)
            throw error
        }
    }
}
