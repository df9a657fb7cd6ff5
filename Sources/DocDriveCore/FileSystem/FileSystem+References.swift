// FileSystem+References: reference entries in the mount: found by name, shown as their target,
// resolved by item id (file handle first, then the path hint), refused when invalid or revoked.
import CDocDriveSys
import Foundation
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

extension DriveFileSystem {
    /// The app id of an app container root ("app:ID:Folder"), nil for stores.
    static func appID(ofRootKey key: String) -> String? { RootKey(key)?.appID }

    @inline(__always)
    static func isContainer(_ root: BackingRoot?) -> Bool { root.map { RootKey.isApp($0.key) } ?? false }

    /// `name` was not found in a container folder: the reference entry of that name, if any.
    func lookupReference(parent: Inode, pfd: Int32, name: UnsafePointer<CChar>) throws(Errno) -> NodeEntry {
        let refName = String(cString: name) + ReservedNames.referenceSuffix
        guard refName.utf8.count <= Names.maxNameBytes else { throw .noSuchFileOrDirectory }
        let fd = try Sys.openPath(pfd, refName)
        let st: stat
        do { st = try Sys.stat(fd: fd) } catch { Sys.close(fd); throw error }
        guard st.st_mode & S_IFMT == S_IFREG else { Sys.close(fd); throw .noSuchFileOrDirectory }
        var payload = ReferenceLink.read(pfd, refName, key: driveKey)
        if let p = payload, Self.appID(ofRootKey: parent.root!.key) != p.app {
            payload = nil  // copied from another app's container: never followed
        }
        if payload == nil {
            logger.warning("reference \(refName) in \(parent.root!.key) failed its check (edited by hand, forged, or copied from another app); not followed")
        }
        let link = ReferenceLink(payload: payload, storeRoot: payload.flatMap { namespace.root(key: $0.rootKey) })
        let inode = table.insertOrFind(fd: fd, st: st, root: parent.root!, view: parent.view, isTopLevel: false, reference: link)
        return NodeEntry(inode: inode, attr: try referenceAttr(inode))
    }

    /// The target's O_PATH descriptor (owned by the link). ENOENT when the target is gone,
    /// EACCES when the file is invalid or the app's grant was revoked (in its own view).
    func referenceTarget(_ n: Inode) throws(Errno) -> Int32 {
        guard let link = n.reference, let p = link.payload else { throw .permissionDenied }
        guard let root = link.storeRoot else { throw .noSuchFileOrDirectory }
        if case .app(let app) = n.view, !hasGrant(app: app.id, root: root.key, item: p.item) { throw .permissionDenied }
        let generation = identityChanges.load(ordering: .relaxed)
        let cur = link.current(generation: generation)
        if cur >= 0, let st = try? Sys.stat(fd: cur), st.st_nlink > 0 { return cur }
        guard let found = locate(root: root, item: p.item, handle: Data(base64Encoded: p.handle).map { [UInt8]($0) }, hint: p.hint) else {
            throw .noSuchFileOrDirectory
        }
        return link.adopt(found.fd, generation: generation)
    }

    /// Why a reference node cannot be followed, or nil if it can.
    func referenceProblem(_ n: Inode) -> ReferenceProblem? {
        do {
            _ = try referenceTarget(n)
            return nil
        } catch {
            if n.reference?.payload == nil { return .invalid }
            return error == .permissionDenied ? .revoked : .missing
        }
    }

    /// The target's attributes; a reference that cannot be followed shows as an empty file.
    func referenceAttr(_ n: Inode) throws(Errno) -> stat {
        if let t = try? referenceTarget(n), let st = try? Sys.stat(fd: t) { return st }
        let fd = try n.acquire()
        defer { n.release() }
        var st = try Sys.stat(fd: fd)
        st.st_size = 0
        st.st_blocks = 0
        return st
    }

    /// The descriptor that operations on `n`'s content and attributes use, and the root the
    /// content lives in: for a reference, its target's. Pair with `n.release()`.
    func acquireContent(_ n: Inode) throws(Errno) -> (fd: Int32, root: BackingRoot?) {
        let fd = try n.acquire()
        guard n.reference != nil else { return (fd, n.root) }
        do {
            return (try referenceTarget(n), n.reference!.storeRoot)
        } catch {
            n.release()
            throw error
        }
    }

    // MARK: finding items by id

    /// The path of `fd` inside `root` ("" for the root itself), nil when outside it or deleted
    /// (a name that is not UTF-8 is shown with replacement characters: see StorePath).
    func relativePath(fd: Int32, root: BackingRoot) -> String? {
        guard case .at(let p) = location(fd: fd, root: root) else { return nil }
        return String(decoding: p.bytes, as: UTF8.self)
    }

    /// Finds the file `item` of `root`: by its file handle (follows renames, also those made
    /// behind the mount's back), else at the path hint. Whatever is found must carry the same
    /// item id in the index, so a reference never leads to another file. Returns an O_PATH
    /// descriptor (the caller owns it) and the current path.
    func locate(root: BackingRoot, item: String, handle: [UInt8]?, hint: String) -> (fd: Int32, path: String)? {
        func check(_ fd: Int32) -> (fd: Int32, path: String)? {
            guard fd >= 0 else { return nil }
            if let st = try? Sys.stat(fd: fd), st.st_nlink > 0, st.st_mode & S_IFMT == S_IFREG,
               let rel = relativePath(fd: fd, root: root), !rel.isEmpty,
               (try? index.knownItemID(root: root.key, ino: Int64(st.st_ino))) == item {
                return (fd, rel)
            }
            Sys.close(fd)
            return nil
        }
        if let handle, !handle.isEmpty {
            let mfd = Glibc.open(root.path, O_RDONLY | Sys.O_DIRECTORY | Sys.O_CLOEXEC)
            if mfd >= 0 {
                let fd = handle.withUnsafeBufferPointer { dd_open_by_handle(mfd, $0.baseAddress, Int32($0.count), Sys.O_PATH | Sys.O_NOFOLLOW) }
                Sys.close(mfd)
                if let found = check(fd) { return found }
            }
        }
        let rfd = Glibc.open(root.path, Sys.O_PATH | Sys.O_DIRECTORY | Sys.O_CLOEXEC)
        guard rfd >= 0 else { return nil }
        defer { Sys.close(rfd) }
        if Names.isSafeRelativePath(hint), let found = check(dd_open_beneath(rfd, hint, Sys.O_PATH | Sys.O_NOFOLLOW, 0)) {
            return found
        }
        // Renamed (through the mount) and then replaced by a save-by-rename: the index knows
        // where the item's id went.
        guard let rst = try? Sys.stat(fd: rfd), let known = try? index.knownPath(id: item, root: root.key, rootIno: Int64(rst.st_ino)),
              known != hint, Names.isSafeRelativePath(known) else { return nil }
        return check(dd_open_beneath(rfd, known, Sys.O_PATH | Sys.O_NOFOLLOW, 0))
    }

    /// The file handle of an O_PATH descriptor ([] when the filesystem has none).
    static func fileHandle(_ fd: Int32) -> [UInt8] {
        var buf = [UInt8](repeating: 0, count: Int(DD_HANDLE_MAX))
        let len = buf.withUnsafeMutableBufferPointer { dd_name_to_handle(fd, $0.baseAddress, Int32($0.count)) }
        return len > 0 ? Array(buf[0..<Int(len)]) : []
    }

    // MARK: grants

    @inline(__always)
    static func grantKey(_ app: String, _ root: String, _ item: String) -> String { app + "\u{0}" + root + "\u{0}" + item }

    func hasGrant(app: String, root: String, item: String) -> Bool {
        grantSet.withLock { $0.contains(Self.grantKey(app, root, item)) }
    }

    /// Adds or drops a grant in the view's check (the index holds the durable record).
    func setGrant(app: String, root: String, item: String, granted: Bool) {
        let k = Self.grantKey(app, root, item)
        grantSet.withLock { s in
            if granted { s.insert(k) } else { s.remove(k) }
        }
    }

    func loadGrants() {
        let all = (try? index.grants()) ?? []
        grantSet.withLock { s in
            for g in all { s.insert(Self.grantKey(g.app, g.root, g.item)) }
        }
    }

    // MARK: telling the kernel

    /// Something changed `name` in a backing folder behind the kernel's back (a command of the
    /// control socket): every view of that folder forgets its cached entry.
    func invalidateEntry(folder fd: Int32, name: String) {
        guard let inv = kernelInvalidation, let st = try? Sys.stat(fd: fd) else { return }
        let ids = table.nodeIDs(dev: UInt64(st.st_dev), ino: UInt64(st.st_ino))
        name.withCString { n in for id in ids { inv.entry(id, n) } }
    }

    /// `mv` of a reference entry inside its container: moves the reference file only (the
    /// target is never touched). A file shown under the new name is replaced, as natively.
    func renameReference(_ pfd: Int32, _ name: UnsafePointer<CChar>, _ npfd: Int32, _ newName: UnsafePointer<CChar>,
                         flags: UInt32) throws(Errno) {
        if flags & UInt32(dd_RENAME_EXCHANGE) != 0 { throw .invalidArgument }
        let from = String(cString: name) + ReservedNames.referenceSuffix
        let to = String(cString: newName) + ReservedNames.referenceSuffix
        guard to.utf8.count <= Names.maxNameBytes else { throw .fileNameTooLong }
        _ = try Sys.stat(pfd, from)
        let plain = try? Sys.stat(npfd, newName)
        if let plain {
            if flags & UInt32(dd_RENAME_NOREPLACE) != 0 { throw .fileExists }
            if plain.st_mode & S_IFMT == S_IFDIR { throw .isDirectory }
        }
        _ = try Sys.check { dd_renameat2(pfd, from, npfd, to, flags) }
        if plain != nil { _ = unlinkat(npfd, newName, 0) }
    }
}
