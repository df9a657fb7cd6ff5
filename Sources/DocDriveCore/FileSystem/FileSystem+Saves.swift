// FileSystem+Saves: an editor's save keeps the document, whatever system calls it makes: a file
// renamed onto a reference's name is saved into the reference's target, and a name created again
// moments after its file was renamed away from it is the same document (vim, Emacs).
import CDocDriveSys
import Foundation
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// Names that a rename just vacated, kept for a few seconds: an editor that renames a document
/// away (`name` -> `name~`) and then creates `name` is saving the document, not making a new one
/// (iCloud Drive and Dropbox treat it so). Keyed by the folder's backing identity, so that every
/// view of a folder (Notes/ and .by-app/ID/Documents/) shares its entries.
///
/// Lock: `entries` is a leaf lock, held for dictionary work only.
final class VacatedNames: Sendable {
    enum Former {
        /// A plain file, now `movedTo` (its folder's node and its name there), was renamed away.
        case file(ino: UInt64)
        /// A reference entry was renamed away; `token` is its signed content.
        case reference(token: [UInt8])
    }

    struct Vacated {
        let former: Former
        /// Where the renamed-away entry went: it must still be there for the new file to take
        /// its place (vim deletes `name~` only after writing `name`).
        let folder: Inode
        let name: [CChar]
        fileprivate let time: Int64
    }

    private struct Key: Hashable {
        var dev: UInt64
        var ino: UInt64
        var name: [CChar]
    }

    /// How long a vacated name is remembered.
    static let window: Int64 = 5_000_000_000
    private static let maxEntries = 64
    private let entries = Mutex<[Key: Vacated]>([:])
    /// Whether any entry is kept: creates and removals skip the lock when there is none.
    private let kept = Atomic<Bool>(false)

    /// `name` in `folder` was renamed away to `to` in `toFolder`.
    func note(folder: Inode, name: UnsafePointer<CChar>, _ former: Former, to toFolder: Inode, _ toName: UnsafePointer<CChar>) {
        let now = Sys.monotonicNanoseconds()
        let v = Vacated(former: former, folder: toFolder, name: Self.bytes(toName), time: now)
        entries.withLock { m in
            if m.count >= Self.maxEntries { m = m.filter { now - $0.value.time < Self.window } }
            if m.count >= Self.maxEntries { m.removeAll() }
            m[Key(dev: folder.dev, ino: folder.ino, name: Self.bytes(name))] = v
            kept.store(true, ordering: .relaxed)
        }
    }

    /// Takes what `name` in `folder` was until a moment ago, if it was renamed away in the window.
    func take(folder: Inode, name: UnsafePointer<CChar>) -> Vacated? {
        guard kept.load(ordering: .relaxed) else { return nil }
        let key = Key(dev: folder.dev, ino: folder.ino, name: Self.bytes(name))
        let now = Sys.monotonicNanoseconds()
        return entries.withLock { m -> Vacated? in
            defer { kept.store(!m.isEmpty, ordering: .relaxed) }
            guard let v = m.removeValue(forKey: key), now - v.time < Self.window else { return nil }
            return v
        }
    }

    /// `name` in `folder` was taken or removed by something else than a new file (a rename onto
    /// it, an unlink): whatever it was before is no longer waiting for a save.
    func forget(folder: Inode, name: UnsafePointer<CChar>) {
        guard kept.load(ordering: .relaxed) else { return }
        let key = Key(dev: folder.dev, ino: folder.ino, name: Self.bytes(name))
        entries.withLock { m in
            m[key] = nil
            kept.store(!m.isEmpty, ordering: .relaxed)
        }
    }

    private static func bytes(_ name: UnsafePointer<CChar>) -> [CChar] {
        Array(UnsafeBufferPointer(start: name, count: strlen(name) + 1))
    }
}

extension DriveFileSystem {
    // MARK: rename-away saves (vim, Emacs)

    /// A rename moved `name` away (not by exchange): remember it for the editor's next create.
    func noteVacated(parent p: Inode, name: UnsafePointer<CChar>, src: stat, to np: Inode, _ newName: UnsafePointer<CChar>) {
        guard src.st_mode & S_IFMT == S_IFREG else { return }
        vacated.note(folder: p, name: name, .file(ino: UInt64(src.st_ino)), to: np, newName)
    }

    /// A reference entry `name` was renamed to `newName` (its file is `newName` + suffix in `npfd`).
    func noteVacatedReference(parent p: Inode, name: UnsafePointer<CChar>, to np: Inode, npfd: Int32, _ newName: UnsafePointer<CChar>) {
        let file = String(cString: newName) + ReservedNames.referenceSuffix
        guard let token = ReferenceLink.readFile(npfd, file) else { return }
        vacated.note(folder: p, name: name, .reference(token: token), to: np, newName)
    }

    /// What a create of `name` in `p` continues, if it is an editor's rename-away save: the
    /// entry renamed away must still be where it went, as what it was.
    func vacatedFor(create p: Inode, name: UnsafePointer<CChar>) -> VacatedNames.Former? {
        guard let v = vacated.take(folder: p, name: name), let dfd = try? v.folder.acquire() else { return nil }
        let still: Bool
        switch v.former {
        case .file(let ino):
            let st = v.name.withUnsafeBufferPointer { try? Sys.stat(dfd, $0.baseAddress!) }
            still = st.map { UInt64($0.st_ino) == ino && $0.st_mode & S_IFMT == S_IFREG } ?? false
        case .reference:
            let file = v.name.withUnsafeBufferPointer { String(cString: $0.baseAddress!) } + ReservedNames.referenceSuffix
            still = faccessat(dfd, file, F_OK, Sys.AT_SYMLINK_NOFOLLOW) == 0
        }
        v.folder.release()
        guard still else { return nil }
        // The file renamed away gives its id to the new one and takes a fresh one: a store
        // looks at it again, or (its rename already on the remote under the old id) it would
        // keep the fresh id here while the remote and every other device know it by the old.
        if case .file = v.former { v.name.withUnsafeBufferPointer { noteChanged(parent: v.folder, name: $0.baseAddress!) } }
        return v.former
    }

    /// vim's or Emacs's save of a reference entry: `name` was renamed away to `name~` and is
    /// created again. The reference comes back under `name` and the new content is written
    /// into its target (truncated, as the new file would be empty), which keeps its inode,
    /// its item id and every reference and bookmark to it. Nil when the reference cannot be
    /// followed (the caller then creates a plain file, as before).
    func createThroughReference(parent p: Inode, pfd: Int32, name: UnsafePointer<CChar>, token: [UInt8],
                                flags: Int32, caller: Caller) -> (NodeEntry, OpenFile)? {
        let refName = String(cString: name) + ReservedNames.referenceSuffix
        guard refName.utf8.count <= Names.maxNameBytes else { return nil }
        let rfd = openat(pfd, refName, O_WRONLY | O_CREAT | O_EXCL | Sys.O_NOFOLLOW | Sys.O_CLOEXEC, 0o644)
        guard rfd >= 0 else { return nil }
        let written = token.withUnsafeBytes { Glibc.write(rfd, $0.baseAddress, $0.count) }
        if daemonUID == 0, let pst = try? Sys.stat(fd: pfd) { _ = fchown(rfd, pst.st_uid, pst.st_gid) }
        let synced = Glibc.fsync(rfd) == 0
        Sys.close(rfd)
        var entry: NodeEntry?
        do throws(Errno) {
            guard written == token.count, synced else { throw .ioError }
            let e = try lookupReference(parent: p, pfd: pfd, name: name)
            entry = e
            guard e.inode.reference?.payload != nil else { throw .permissionDenied }
            let f = try open(e.inode.nodeID, flags: (flags & ~(O_CREAT | O_EXCL)) | O_TRUNC, caller: caller)
            var attr = e.attr
            if let st = try? Sys.stat(fd: f.fd) { attr = st }
            logger.debug("save of reference \(refName) in \(p.root!.key) by rename-away: written into its target")
            return (NodeEntry(inode: e.inode, attr: attr), f)
        } catch {
            if let entry { forget(entry.inode.nodeID, 1) }
            _ = unlinkat(pfd, refName, 0)
            return nil
        }
    }

    // MARK: write-temp-then-rename saves onto a reference (sed -i, os.replace, GIO, QSaveFile, LibreOffice)

    /// `name` in `p` (a plain file) is renamed onto the reference entry `newName` in `np`: an
    /// editor saving the document. The new file replaces the reference's target in its store
    /// (moved there when both are on one filesystem, else copied), keeps the target's item id,
    /// and is uploaded; the reference stays. False when the reference cannot be followed
    /// (invalid, revoked, target gone): the caller then replaces the entry, as a rename would.
    func saveThroughReference(parent p: Inode, pfd: Int32, name: UnsafePointer<CChar>, src: stat,
                              refParent np: Inode, npfd: Int32, newName: UnsafePointer<CChar>) throws(Errno) -> Bool {
        guard src.st_mode & S_IFMT == S_IFREG, let app = Self.appID(ofRootKey: np.root!.key) else { return false }
        let refName = String(cString: newName) + ReservedNames.referenceSuffix
        guard let payload = ReferenceLink.read(npfd, refName, key: driveKey), payload.app == app,
              let store = namespace.root(key: payload.rootKey) else { return false }
        if case .app(let viewApp) = np.view, !hasGrant(app: viewApp.id, root: store.key, item: payload.item) { return false }
        guard let target = locate(root: store, item: payload.item, handle: Data(base64Encoded: payload.handle).map { [UInt8]($0) },
                                  hint: payload.hint) else { return false }
        defer { Sys.close(target.fd) }
        let tst = try Sys.stat(fd: target.fd)
        // The target's folder, beneath the store's folder, never through a symlink.
        let rootfd = try Sys.openPath(absolute: store.path)
        defer { Sys.close(rootfd) }
        let (folder, targetName) = Self.split(target.path)
        let tdir = folder.isEmpty ? dup(rootfd) : dd_open_beneath(rootfd, folder, Sys.O_PATH | Sys.O_DIRECTORY | Sys.O_NOFOLLOW, 0)
        guard tdir >= 0 else { return false }
        defer { Sys.close(tdir) }
        let folderStat = try Sys.stat(fd: tdir)
        var newIno = Int64(src.st_ino)
        var moved = false
        if src.st_nlink == 1 {
            if renameat(pfd, name, tdir, targetName) == 0 {
                moved = true
            } else if errno != EXDEV {
                throw Sys.lastErrno
            }
        }
        if !moved {
            // Another filesystem (or a file with other names): a copy, renamed into place.
            newIno = try copyOver(from: pfd, name, into: tdir, targetName)
            _ = unlinkat(pfd, name, 0)
        }
        publish(.savedThroughReference(parent: p, src: src, store: store, path: target.path, name: targetName,
                                       oldTarget: tst, newIno: newIno, folderIno: Int64(folderStat.st_ino)))
        invalidateLater(folder: tdir, name: targetName)
        invalidateLater(folder: npfd, name: String(cString: newName))
        logger.debug("save by rename onto reference \(refName) in \(np.root!.key): now \(store.key)/\(target.path)")
        return true
    }

    /// Copies the file `name` in `sdir` to a temporary name beside `targetName` in `tdir`,
    /// synced, and renames it over `targetName`. Returns the new file's inode number.
    private func copyOver(from sdir: Int32, _ name: UnsafePointer<CChar>, into tdir: Int32, _ targetName: String) throws(Errno) -> Int64 {
        let input = try Sys.check { openat(sdir, name, O_RDONLY | Sys.O_NOFOLLOW | Sys.O_CLOEXEC) }
        defer { Sys.close(input) }
        let ist = try Sys.stat(fd: input)
        let tmp = ".docdrive-save-" + ItemIndex.newID()
        let out = try Sys.check { openat(tdir, tmp, O_WRONLY | O_CREAT | O_EXCL | Sys.O_NOFOLLOW | Sys.O_CLOEXEC, ist.st_mode & 0o7777) }
        var ok = false
        defer {
            Sys.close(out)
            if !ok { _ = unlinkat(tdir, tmp, 0) }
        }
        var buf = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buf.withUnsafeMutableBytes { Glibc.read(input, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw Sys.lastErrno }
            if n == 0 { break }
            var done = 0
            while done < n {
                let w = buf.withUnsafeBytes { Glibc.write(out, $0.baseAddress! + done, n - done) }
                if w < 0 && errno == EINTR { continue }
                if w <= 0 { throw w < 0 ? Sys.lastErrno : .noSpace }
                done += w
            }
        }
        var times = [ist.st_atim, ist.st_mtim]
        _ = futimens(out, &times)
        _ = try Sys.check { Glibc.fsync(out) }
        _ = try Sys.check { renameat(tdir, tmp, tdir, targetName) }
        ok = true
        return Int64(try Sys.stat(fd: out).st_ino)
    }

    /// Drops the kernel's cached entry `name` of the folder `fd` from the thread of
    /// `kernelNotices`: the invalidation waits for the kernel's lock of that folder, which a
    /// request may hold (this request, or one whose handler waits for the caller: an open of
    /// a placeholder waits for its download, whose worker tells the kernel of it).
    func invalidateLater(folder fd: Int32, name: String) {
        guard let st = try? Sys.stat(fd: fd) else { return }
        let ids = table.nodeIDs(dev: UInt64(st.st_dev), ino: UInt64(st.st_ino))
        guard !ids.isEmpty, let inv = kernelInvalidation else { return }
        kernelNotices.async {
            name.withCString { n in for id in ids { inv.entry(id, n) } }
        }
    }

    /// Returns once the entry invalidations asked so far were sent (for `docdrive sync`; never
    /// call it on a request thread).
    public func waitForKernelNotices() {
        kernelNotices.sync {}
    }

    static func split(_ path: String) -> (folder: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return ("", path) }
        return (String(path[..<slash]), String(path[path.index(after: slash)...]))
    }
}
