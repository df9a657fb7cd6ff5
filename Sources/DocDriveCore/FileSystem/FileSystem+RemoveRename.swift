// FileSystem+RemoveRename: unlink, rmdir and rename, and the removed files' blocks freed after the reply.
import CDocDriveSys
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

extension DriveFileSystem {
    public func unlink(parent: UInt64, name: UnsafePointer<CChar>) throws(Errno) {
        let p = try writableParent(parent)
        let pfd = try p.acquire()
        defer { p.release() }
        if ReservedNames.isReserved(name) { throw .noSuchFileOrDirectory }
        vacated.forget(folder: p, name: name)
        let st: stat
        do {
            st = try Sys.stat(pfd, name)
        } catch {
            // rm of a reference entry removes the reference only, never its target.
            guard error == .noSuchFileOrDirectory, Self.isContainer(p.root) else { throw error }
            let ref = String(cString: name) + ReservedNames.referenceSuffix
            _ = try Sys.check { unlinkat(pfd, ref, 0) }
            return
        }
        let own = expectOwnChange(p, name)
        let held = holdForFreeing(pfd, name, st)
        do {
            _ = try Sys.check { unlinkat(pfd, name, 0) }
        } catch {
            withdrawOwnChange(own, p, pfd, name)
            if held >= 0 { Sys.close(held) }
            throw error
        }
        publish(.removed(parent: p, name: name, st: st))
        freeLater(held)
    }

    public func rmdir(parent: UInt64, name: UnsafePointer<CChar>) throws(Errno) {
        let p = try writableParent(parent)
        let pfd = try p.acquire()
        defer { p.release() }
        let st = try Sys.stat(pfd, name)
        let own = expectOwnChange(p, name)
        let held = holdForFreeing(pfd, name, st)
        do {
            _ = try Sys.check { unlinkat(pfd, name, Sys.AT_REMOVEDIR) }
        } catch {
            withdrawOwnChange(own, p, pfd, name)
            if held >= 0 { Sys.close(held) }
            throw error
        }
        publish(.removed(parent: p, name: name, st: st))
        freeLater(held)
    }

    /// Before `name` (`st`) is removed or replaced: an O_PATH descriptor of it when removing its
    /// last name frees blocks, so that they are freed off this thread (see DeferredFrees); -1
    /// if not. A name replaced behind the mount's back in between costs nothing: the
    /// descriptor then holds the other file a moment longer.
    ///
    /// Only while the backing file system has room to spare (`DeferredFrees.spareRoom`, and
    /// twice what the file holds): whoever removes a file to make room on a full disk writes
    /// again at once, and must find the room there.
    private func holdForFreeing(_ pfd: Int32, _ name: UnsafePointer<CChar>, _ st: stat) -> Int32 {
        let type = st.st_mode & S_IFMT
        guard st.st_blocks > 0, type == S_IFDIR || (type == S_IFREG && st.st_nlink <= 1) else { return -1 }
        var sv = statvfs()
        guard fstatvfs(pfd, &sv) == 0 else { return -1 }
        let room = UInt64(sv.f_bavail) * UInt64(sv.f_frsize)
        guard room >= max(DeferredFrees.spareRoom, 2 * UInt64(st.st_blocks) * 512) else { return -1 }
        return openat(pfd, name, Sys.O_PATH | Sys.O_NOFOLLOW | Sys.O_CLOEXEC)
    }

    private func freeLater(_ held: Int32) {
        if held >= 0, !frees.hand(held) { Sys.close(held) }
    }

    public func rename(parent: UInt64, name: UnsafePointer<CChar>, newParent: UInt64, newName: UnsafePointer<CChar>, flags: UInt32) throws(Errno) {
        let p = try writableParent(parent)
        let np = try writableParent(newParent)
        try checkName(newName)
        // Two top-level folders are two stores or containers: `mv` copies when told EXDEV. So are
        // two views of one folder (Notes/ and .by-app/ID/Documents/): each view has its own nodes.
        if p.root !== np.root || p.view != np.view { throw .improperLink }
        let pfd = try p.acquire()
        defer { p.release() }
        let npfd = try np.acquire()
        defer { np.release() }
        if ReservedNames.isReserved(name) { throw .noSuchFileOrDirectory }
        let src: stat
        do {
            src = try Sys.stat(pfd, name)
        } catch {
            guard error == .noSuchFileOrDirectory, Self.isContainer(p.root) else { throw error }
            try renameReference(pfd, name, npfd, newName, flags: flags)
            vacated.forget(folder: np, name: newName)
            noteVacatedReference(parent: p, name: name, to: np, npfd: npfd, newName)
            return
        }
        let exchange = flags & UInt32(dd_RENAME_EXCHANGE) != 0
        let dst = try? Sys.stat(npfd, newName)
        // A reference entry shown under the new name is replaced, as a file there would be.
        let shadowed = dst == nil && Self.isContainer(np.root) && !exchange
            ? String(cString: newName) + ReservedNames.referenceSuffix : nil
        if let shadowed, (try? Sys.stat(npfd, shadowed)) != nil {
            if flags & UInt32(dd_RENAME_NOREPLACE) != 0 { throw .fileExists }
            // An editor's save onto the document's name: the document is saved, the reference stays.
            if try saveThroughReference(parent: p, pfd: pfd, name: name, src: src, refParent: np, npfd: npfd, newName: newName) {
                vacated.forget(folder: np, name: newName)
                return
            }
        }
        // An exchange is reported as two moves each way: it is told to the kernel as before. A
        // rename onto another link of the same file does nothing and reports nothing.
        let sameFile = dst.map { $0.st_dev == src.st_dev && $0.st_ino == src.st_ino } ?? false
        let ownFrom = exchange || sameFile ? nil : expectOwnChange(p, name)
        let ownTo = exchange || sameFile ? nil : expectOwnChange(np, newName)
        let held = exchange || sameFile ? -1 : dst.map { holdForFreeing(npfd, newName, $0) } ?? -1
        do {
            if flags == 0 {
                _ = try Sys.check { renameat(pfd, name, npfd, newName) }
            } else {
                _ = try Sys.check { dd_renameat2(pfd, name, npfd, newName, flags) }
            }
        } catch {
            withdrawOwnChange(ownFrom, p, pfd, name)
            withdrawOwnChange(ownTo, np, npfd, newName)
            if held >= 0 { Sys.close(held) }
            throw error
        }
        if let shadowed { _ = unlinkat(npfd, shadowed, 0) }
        vacated.forget(folder: np, name: newName)
        if !exchange { noteVacated(parent: p, name: name, src: src, to: np, newName) }
        publish(.renamed(from: p, name: name, to: np, newName: newName, src: src, dst: dst, exchange: exchange))
        freeLater(held)
    }
}
