// DocumentService: the Document Picker's four modes (open, import, move, export), bookmarks and
// grants, run inside the daemon for the commands of the control socket.
import CDocDriveSys
import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// Every method either finishes or leaves things as they were (a clash gets a free name, a
/// failure half-way is undone), and answers a one-sentence DriveError otherwise.
public final class DocumentService: Sendable {
    let fs: DriveFileSystem
    var logger: Logger { fs.logger }

    public init(fs: DriveFileSystem) {
        self.fs = fs
    }

    // MARK: places

    /// A path as the user sees it, resolved to a backing root and a path inside it.
    struct Place {
        var root: BackingRoot
        /// Path inside the root; "" for the root itself.
        var rel: String
        var rootKey: String { root.key }
        var appID: String? { DriveFileSystem.appID(ofRootKey: root.key) }
        var name: String { String(rel.split(separator: "/").last ?? "") }
        var parent: String { rel.contains("/") ? String(rel[..<rel.lastIndex(of: "/")!]) : "" }
    }

    /// Publishes that the mode made, replaced or removed `place`, whose folder is open as
    /// `folder` (DriveChanges: the kernel forgets its entry, a store's upload is scheduled).
    func published(_ place: Place, in folder: Int32) {
        fs.changes.publish(.document(DocumentChange(root: place.root, rel: place.rel, folder: folder, name: place.name), in: fs))
    }

    /// "Work/report.odt", "Notes/x", ".by-app/ID/Data/y" (relative to the mount root).
    func place(_ userPath: String) throws(DriveError) -> Place {
        let parts = userPath.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let first = parts.first else { throw DriveError(.invalidName, "Give a path inside the drive, like Work/report.odt.") }
        if let p = parts.first(where: { Names.problem(withFileName: $0) != nil || ReservedNames.isReserved($0) }) {
            throw DriveError(.invalidName, "The path \"\(userPath)\" is not valid: \"\(p)\" is not a name it can contain.")
        }
        let l = fs.namespace.current()
        if first == DriveFileSystem.byAppName {
            guard parts.count >= 3, let root = l.appFolders[parts[1]]?[parts[2]] else {
                throw DriveError(.notFound, "There is no \(parts.prefix(3).joined(separator: "/")) in the drive.")
            }
            return Place(root: root, rel: parts.dropFirst(3).joined(separator: "/"))
        }
        guard let root = l.topLevel[first] else {
            throw DriveError(.notFound, "There is no \"\(first)\" at the top of the drive (see `docdrive status`).")
        }
        return Place(root: root, rel: parts.dropFirst().joined(separator: "/"))
    }

    /// A path from the mount root that is in a store: the store's key and the path in it.
    public func storeItem(_ userPath: String) throws(DriveError) -> (root: String, path: StorePath) {
        let p = try place(userPath)
        guard p.root.isStore else {
            throw DriveError(.unsupported, "\(userPath) is not in a store: only a store's files have content elsewhere.")
        }
        return (p.root.key, StorePath(p.rel))
    }

    /// A store by name or display name, with an optional folder after a "/".
    func storePlace(_ to: String) throws(DriveError) -> Place {
        let parts = to.split(separator: "/", maxSplits: 1).map(String.init)
        guard let head = parts.first else { throw DriveError(.invalidName, "Name a store with --to.") }
        let l = fs.namespace.current()
        guard let store = l.config.stores.first(where: { $0.name == head || $0.displayName == head }),
              let root = fs.namespace.root(key: store.rootKey) else {
            throw DriveError(.notFound, "There is no store \"\(head)\" (see `docdrive store list`).")
        }
        let folder = parts.count > 1 ? parts[1].split(separator: "/").joined(separator: "/") : ""
        if !folder.isEmpty, let p = Names.problem(withRelativePath: folder) {
            throw DriveError(.invalidName, "The folder \"\(folder)\" is not valid: \(p).")
        }
        return Place(root: root, rel: folder)
    }

    func display(_ p: Place) -> String { fs.namespace.displayPath(rootKey: p.rootKey, p.rel) }

    func requireApp(_ app: String) throws(DriveError) {
        guard fs.namespace.current().appFolders[app] != nil else { throw DriveError.noSuchApp(app) }
    }

    /// An O_PATH descriptor of a folder or file below a root (never leaving it, no symlinks).
    func openBeneath(_ root: BackingRoot, _ rel: String, flags: Int32 = Sys.O_PATH | Sys.O_NOFOLLOW) -> (fd: Int32, errno: Int32) {
        let rfd = Glibc.open(root.path, Sys.O_PATH | Sys.O_DIRECTORY | Sys.O_CLOEXEC)
        guard rfd >= 0 else { return (-1, errno) }
        defer { Sys.close(rfd) }
        if rel.isEmpty {
            let fd = dd_reopen(rfd, flags & ~Sys.O_NOFOLLOW)
            return (fd, fd < 0 ? errno : 0)
        }
        let fd = dd_open_beneath(rfd, rel, flags, 0)
        return (fd, fd < 0 ? dd_errno() : 0)
    }

    /// The folder `rel` of a place, opened for creating entries in.
    func openFolder(_ root: BackingRoot, _ rel: String, shown: String) throws(DriveError) -> Int32 {
        let (fd, e) = openBeneath(root, rel, flags: O_RDONLY | Sys.O_DIRECTORY | Sys.O_NOFOLLOW)
        guard fd >= 0 else {
            if e == ENOENT || e == ENOTDIR { throw DriveError(.notFound, "There is no folder \(shown).") }
            throw DriveError.io("Cannot open the folder \(shown)", .init(rawValue: e))
        }
        return fd
    }

    /// What a path names: a file (O_PATH descriptor) or a reference entry (its payload).
    enum Item {
        case file(fd: Int32, st: stat)
        case reference(ReferencePayload)
    }

    func item(at p: Place, shown: String) throws(DriveError) -> Item {
        guard !p.rel.isEmpty else { throw DriveError(.invalidName, "\(shown) is a top-level folder, not a document.") }
        let (fd, e) = openBeneath(p.root, p.rel)
        if fd >= 0 {
            var st = stat()
            guard fstatat(fd, "", &st, Sys.AT_EMPTY_PATH | Sys.AT_SYMLINK_NOFOLLOW) == 0, st.st_mode & S_IFMT == S_IFREG else {
                Sys.close(fd)
                throw DriveError(.invalidName, "\(shown) is not a document (a regular file).")
            }
            return .file(fd: fd, st: st)
        }
        if e == ENOENT, DriveFileSystem.isContainer(p.root) {
            let (dfd, _) = openBeneath(p.root, p.parent, flags: O_RDONLY | Sys.O_DIRECTORY | Sys.O_NOFOLLOW)
            if dfd >= 0 {
                defer { Sys.close(dfd) }
                let refName = ReservedNames.referenceName(p.name)
                if faccessat(dfd, refName, F_OK, Sys.AT_SYMLINK_NOFOLLOW) == 0 {
                    guard let payload = ReferenceLink.read(dfd, refName, key: fs.driveKey), payload.app == p.appID else {
                        throw DriveError(.invalidToken, "The reference entry \(shown) was altered or copied from another app; it is not followed.")
                    }
                    return .reference(payload)
                }
            }
        }
        if e == ENOENT || e == ENOTDIR { throw DriveError(.notFound, "There is no \(shown) in the drive.") }
        if e == ELOOP { throw DriveError(.invalidName, "\(shown) is a symbolic link (or goes through one); give the document itself.") }
        throw DriveError.io("Cannot open \(shown)", .init(rawValue: e))
    }

    /// The store item a reference points at, found now.
    func target(of payload: ReferencePayload, shown: String) throws(DriveError) -> (root: BackingRoot, fd: Int32, rel: String) {
        guard let root = fs.namespace.root(key: payload.rootKey) else {
            throw DriveError(.notFound, "The document \(shown) refers to is gone (its store \(payload.store) was removed).")
        }
        guard let found = fs.locate(root: root, item: payload.item, handle: Data(base64Encoded: payload.handle).map { [UInt8]($0) },
                                    hint: payload.hint) else {
            throw DriveError(.notFound, "The document \(shown) refers to is gone from \(fs.namespace.displayPath(rootKey: root.key, "")).")
        }
        return (root, found.fd, found.path)
    }

    // MARK: free names and new files

    /// "report.odt", "report 2.odt", "report 3.odt", ... (the Finder's way).
    public static func candidates(_ name: String) -> AnySequence<String> {
        let dot = name.lastIndex(of: ".").flatMap { $0 == name.startIndex ? nil : $0 }
        let stem = dot.map { String(name[..<$0]) } ?? name
        let ext = dot.map { String(name[$0...]) } ?? ""
        var i = 1
        return AnySequence(AnyIterator {
            defer { i += 1 }
            if i > 10_000 { return nil }
            return i == 1 ? name : "\(stem) \(i)\(ext)"
        })
    }

    /// Whether `name` is taken in a folder: by a file, or (in containers) by a reference entry.
    static func taken(_ dirfd: Int32, _ name: String) -> Bool {
        faccessat(dirfd, name, F_OK, Sys.AT_SYMLINK_NOFOLLOW) == 0
            || faccessat(dirfd, ReservedNames.referenceName(name), F_OK, Sys.AT_SYMLINK_NOFOLLOW) == 0
    }

    /// Gives `fd` (an O_TMPFILE) a free name in `dirfd`: linkat fails rather than overwrite.
    func link(tmp fd: Int32, into dirfd: Int32, names: AnySequence<String>, fileName: (String) -> String = { $0 },
              noRename: Bool, shown: String) throws(DriveError) -> String {
        for name in names {
            if Self.taken(dirfd, name) {
                if noRename { throw DriveError(.alreadyExists, "\(shown)/\(name) already exists (without --no-rename a free name is chosen).") }
                continue
            }
            let file = fileName(name)
            guard file.utf8.count <= Names.maxNameBytes else {
                throw DriveError(.invalidName, "The name \"\(name)\" is too long for the drive to keep it.")
            }
            if linkat(AT_FDCWD, "/proc/self/fd/\(fd)", dirfd, file, dd_AT_SYMLINK_FOLLOW) == 0 { return name }
            if errno == EEXIST {
                if noRename { throw DriveError(.alreadyExists, "\(shown)/\(name) already exists.") }
                continue
            }
            throw DriveError.io("Cannot create \(shown)/\(name)", .init(rawValue: errno))
        }
        throw DriveError(.alreadyExists, "No free name is left for \(shown).")
    }

    /// A new unnamed file in `dirfd` (O_TMPFILE), owned like the folder.
    func newTempFile(in dirfd: Int32, mode: mode_t, owner: (uid_t, gid_t)?, shown: String) throws(DriveError) -> Int32 {
        let fd = dd_open_beneath(dirfd, ".", O_RDWR | dd_O_TMPFILE, mode)
        guard fd >= 0 else { throw DriveError.io("Cannot create a file in \(shown)", .init(rawValue: dd_errno())) }
        if let (uid, gid) = owner { _ = fchown(fd, uid, gid) }
        _ = fchmod(fd, mode)
        return fd
    }

    func folderOwner(_ dirfd: Int32) -> (uid_t, gid_t)? {
        var st = stat()
        return fstat(dirfd, &st) == 0 ? (st.st_uid, st.st_gid) : nil
    }

    /// Copies the content of `src` (O_PATH) into a new unnamed file in `dirfd`, synced.
    func copyContent(from src: Int32, st: stat, into dirfd: Int32, shown: String) throws(DriveError) -> Int32 {
        let input = dd_reopen(src, O_RDONLY)
        guard input >= 0 else { throw DriveError.io("Cannot read the document", .init(rawValue: errno)) }
        defer { Sys.close(input) }
        let out = try newTempFile(in: dirfd, mode: st.st_mode & 0o7777, owner: folderOwner(dirfd), shown: shown)
        var buf = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buf.withUnsafeMutableBytes { Glibc.read(input, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 {
                let e = errno
                Sys.close(out)
                throw DriveError.io("Cannot read the document", .init(rawValue: e))
            }
            if n == 0 { break }
            var done = 0
            while done < n {
                let w = buf.withUnsafeBytes { Glibc.write(out, $0.baseAddress! + done, n - done) }
                if w < 0 && errno == EINTR { continue }
                if w <= 0 {
                    let e = errno
                    Sys.close(out)
                    throw DriveError.io("Cannot write the copy in \(shown)", .init(rawValue: e))
                }
                done += w
            }
        }
        var times = [st.st_atim, st.st_mtim]
        _ = futimens(out, &times)
        guard fsync(out) == 0 else {
            let e = errno
            Sys.close(out)
            throw DriveError.io("Cannot write the copy in \(shown)", .init(rawValue: e))
        }
        return out
    }

    /// Writes a reference file for `payload` named after `names` in a container folder.
    func writeReference(_ payload: ReferencePayload, into dirfd: Int32, names: AnySequence<String>, noRename: Bool,
                        shown: String) throws(DriveError) -> String {
        guard let key = fs.driveKey else {
            throw DriveError(.notFound, "The drive key is missing or unreadable; references cannot be signed.")
        }
        let fd = try newTempFile(in: dirfd, mode: 0o644, owner: folderOwner(dirfd), shown: shown)
        defer { Sys.close(fd) }
        let text = ReferenceLink.encode(payload, key: key)
        let ok = text.withCString { Glibc.write(fd, $0, strlen($0)) } == text.utf8.count && fsync(fd) == 0
        guard ok else { throw DriveError.io("Cannot write the reference in \(shown)", .init(rawValue: errno)) }
        let name = try link(tmp: fd, into: dirfd, names: names, fileName: ReservedNames.referenceName, noRename: noRename, shown: shown)
        _ = fsync(dirfd)
        return name
    }

    func joined(_ dir: String, _ name: String) -> String { dir.isEmpty ? name : dir + "/" + name }

    /// Runs `body` inside a coordinated intent on the file `fd` (O_PATH): a move writes, a copy
    /// reads; a process's advisory lock that does not go within 10 s makes it fail, undone.
    func coordinated<T>(_ fd: Int32, _ access: Coordinator.Access, shown: String,
                        _ body: () throws(DriveError) -> T) throws(DriveError) -> T {
        let lfd = dd_reopen(fd, access == .writing ? O_RDWR : O_RDONLY)
        guard lfd >= 0 else { throw DriveError.io("Cannot open \(shown)", .init(rawValue: errno)) }
        defer { Sys.close(lfd) }
        do {
            return try fs.coordinator.coordinate([.init(fd: lfd, access)], timeout: 10) { try body() }
        } catch let e as DriveError {
            if e.code == .busy {
                throw DriveError(.busy, "\(shown) is in use: another program holds a lock on it; try again once it is closed.")
            }
            throw e
        } catch {
            throw DriveError(.io, "\(shown): \(error).")
        }
    }

    // MARK: the four modes

    /// Open mode: a reference to a store document in the app's container, and a grant.
    public func open(app: String, path: String, as newName: String?, into: String?, noRename: Bool) throws(DriveError) -> ReferenceAnswer {
        try requireApp(app)
        let src = try place(path)
        guard RootKey.isStore(src.rootKey) else {
            throw DriveError(.invalidName, "Open mode is for documents kept in a store; \(path) is in an app's container (use import or move).")
        }
        var (fd, st): (Int32, stat)
        switch try item(at: src, shown: path) {
        case .file(let f, let s): (fd, st) = (f, s)
        case .reference: throw DriveError(.invalidName, "\(path) is a reference entry; open its document instead.")
        }
        defer { Sys.close(fd) }
        let id = try fs.itemID(fd: fd, st: st, root: src.root)
        let name = newName ?? src.name
        if let p = Names.problem(withFileName: name) ?? (ReservedNames.isReserved(name) ? "it ends with a reserved suffix" : nil) {
            throw DriveError(.invalidName, "The name \"\(name)\" is not valid: \(p).")
        }
        let docs = fs.namespace.current().appFolders[app]!["Documents"]!
        let folder = try Self.checkedFolder(into)
        let dest = Place(root: docs, rel: folder)
        let dirfd = try openFolder(docs, folder, shown: display(dest))
        defer { Sys.close(dirfd) }
        let payload = ReferencePayload(app: app, store: RootKey(src.rootKey)?.storeName ?? src.rootKey, item: id, hint: src.rel,
                                       handle: Data(DriveFileSystem.fileHandle(fd)).base64EncodedString(),
                                       created: Date().timeIntervalSince1970)
        let shownName = try writeReference(payload, into: dirfd, names: Self.candidates(name), noRename: noRename, shown: display(dest))
        try grant(app: app, root: src.rootKey, item: id, path: src.rel)
        let ref = Place(root: docs, rel: joined(folder, shownName))
        published(ref, in: dirfd)
        logger.info("open: \(app) got a reference \(display(ref)) to \(path)")
        return ReferenceAnswer(reference: display(ref), target: display(src), item: id, app: app)
    }

    static func checkedFolder(_ into: String?) throws(DriveError) -> String {
        guard let into, !into.isEmpty else { return "" }
        let f = into.split(separator: "/").joined(separator: "/")
        if let p = Names.problem(withRelativePath: f) { throw DriveError(.invalidName, "The folder \"\(into)\" is not valid: \(p).") }
        return f
    }

    func grant(app: String, root: String, item: String, path: String) throws(DriveError) {
        try fs.index.addGrant(Grant(app: app, root: root, item: item, path: path, created: Date().timeIntervalSince1970))
        fs.setGrant(app: app, root: root, item: item, granted: true)
    }

    /// Import mode: a copy in the app's Inbox, removed at unmount and by `app close`.
    public func importDocument(app: String, path: String) throws(DriveError) -> CopyAnswer {
        try requireApp(app)
        let src = try place(path)
        var fd: Int32, st: stat, content: (root: BackingRoot, rel: String)
        switch try item(at: src, shown: path) {
        case .file(let f, let s): (fd, st, content) = (f, s, (src.root, src.rel))
        case .reference(let payload):
            let t = try target(of: payload, shown: path)
            (fd, content) = (t.fd, (t.root, t.rel))
            st = stat()
            _ = fstatat(fd, "", &st, Sys.AT_EMPTY_PATH)
        }
        defer { Sys.close(fd) }
        // A placeholder's content is downloaded first (in place: the same inode): the copy is of
        // the document, not of the sparse file that stands for it.
        if content.root.isStore, case .placeholder? = Placeholder.mark(fd: fd) {
            do throws(DriveError) {
                _ = try fs.sync.onDemand.fillAndWait(root: content.root.key, path: StorePath(content.rel))
            } catch {
                let why = error.message.hasSuffix(".") ? String(error.message.dropLast()) : error.message
                throw DriveError(error.code, "\(path) is only on the remote and cannot be downloaded now (\(why.prefix(1).lowercased() + why.dropFirst())).")
            }
            _ = fstatat(fd, "", &st, Sys.AT_EMPTY_PATH)
        }
        let inbox = fs.namespace.current().appFolders[app]!["Inbox"]!
        let dest = Place(root: inbox, rel: "")
        let dirfd = try openFolder(inbox, "", shown: display(dest))
        defer { Sys.close(dirfd) }
        let copy = try coordinated(fd, .reading, shown: path) { () throws(DriveError) in
            try copyContent(from: fd, st: st, into: dirfd, shown: display(dest))
        }
        defer { Sys.close(copy) }
        let name = try link(tmp: copy, into: dirfd, names: Self.candidates(src.name), noRename: false, shown: display(dest))
        _ = fsync(dirfd)
        do {
            try fs.index.addImport(app: app, name: name)
        } catch {
            _ = unlinkat(dirfd, name, 0)  // untracked, it would never be removed
            throw error
        }
        published(Place(root: inbox, rel: name), in: dirfd)
        return CopyAnswer(copy: display(Place(root: inbox, rel: name)), source: display(src), app: app)
    }

    /// A document of the app's own container (not a reference), for move and export.
    func ownDocument(app: String, path: String, verb: String) throws(DriveError) -> (Place, Int32, stat) {
        try requireApp(app)
        let src = try place(path)
        guard src.appID == app else {
            throw DriveError(.invalidName, "\(path) is not in the container of \(app); \(verb) takes one of its own documents.")
        }
        switch try item(at: src, shown: path) {
        case .file(let f, let s): return (src, f, s)
        case .reference: throw DriveError(.invalidName, "\(path) is a reference to a document that is already in a store.")
        }
    }

    /// MoveToService: the document goes into the store; a reference takes its place.
    public func move(app: String, path: String, to: String, noRename: Bool) throws(DriveError) -> ReferenceAnswer {
        let (src, fd, st) = try ownDocument(app: app, path: path, verb: "move")
        defer { Sys.close(fd) }
        let id = try fs.itemID(fd: fd, st: st, root: src.root)
        let dst = try storePlace(to)
        let srcDir = try openFolder(src.root, src.parent, shown: display(Place(root: src.root, rel: src.parent)))
        defer { Sys.close(srcDir) }
        let dstDir = try openFolder(dst.root, dst.rel, shown: display(dst))
        defer { Sys.close(dstDir) }
        let aside = ".docdrive-moving-\(UUID().uuidString)" + ReservedNames.referenceSuffix
        let (newName, copied, target) = try coordinated(fd, .writing, shown: path) { () throws(DriveError) -> (String, Bool, Place) in
            // 1. The document into the store, under a free name (rename when on one filesystem).
            var newName = ""
            var copied = false
            for cand in Self.candidates(src.name) {
                if Self.taken(dstDir, cand) {
                    if noRename { throw DriveError(.alreadyExists, "\(display(dst))/\(cand) already exists.") }
                    continue
                }
                if dd_renameat2(srcDir, src.name, dstDir, cand, UInt32(dd_RENAME_NOREPLACE)) == 0 {
                    newName = cand
                    break
                }
                let e = dd_errno()
                if e == EEXIST { continue }
                guard e == EXDEV else { throw DriveError.io("Cannot move \(path) into \(display(dst))", .init(rawValue: e)) }
                let copy = try copyContent(from: fd, st: st, into: dstDir, shown: display(dst))
                defer { Sys.close(copy) }
                newName = try link(tmp: copy, into: dstDir, names: Self.candidates(src.name), noRename: noRename, shown: display(dst))
                // The original steps aside (under a reserved, unlisted name) for the reference.
                guard renameat(srcDir, src.name, srcDir, aside) == 0 else {
                    let e = errno
                    _ = unlinkat(dstDir, newName, 0)
                    throw DriveError.io("Cannot move \(path)", .init(rawValue: e))
                }
                copied = true
                break
            }
            guard !newName.isEmpty else { throw DriveError(.alreadyExists, "No free name is left in \(display(dst)).") }
            _ = fsync(dstDir)
            let target = Place(root: dst.root, rel: joined(dst.rel, newName))
            // 2. The reference in the document's old place; if that fails, the move is undone.
            let payload = ReferencePayload(app: app, store: RootKey(dst.rootKey)?.storeName ?? dst.rootKey, item: id, hint: target.rel,
                                           handle: Data(DriveFileSystem.fileHandle(fd)).base64EncodedString(),
                                           created: Date().timeIntervalSince1970)
            do throws(DriveError) {
                var dstSt = stat()
                _ = fstatat(dstDir, newName, &dstSt, Sys.AT_SYMLINK_NOFOLLOW)
                var pst = stat()
                _ = fstat(dstDir, &pst)
                try fs.index.moveItem(id: id, toRoot: dst.rootKey, ino: Int64(dstSt.st_ino), parentIno: Int64(pst.st_ino), name: newName)
                var p = payload
                if copied { p.handle = "" }  // the handle was the container file's
                _ = try writeReference(p, into: srcDir, names: AnySequence([src.name]), noRename: true, shown: display(Place(root: src.root, rel: src.parent)))
            } catch {
                if copied {
                    _ = unlinkat(dstDir, newName, 0)
                    _ = renameat(srcDir, aside, srcDir, src.name)
                } else {
                    _ = dd_renameat2(dstDir, newName, srcDir, src.name, UInt32(dd_RENAME_NOREPLACE))
                }
                throw error
            }
            return (newName, copied, target)
        }
        if copied { _ = unlinkat(srcDir, aside, 0) }
        _ = fsync(srcDir)
        try grant(app: app, root: dst.rootKey, item: id, path: target.rel)
        published(src, in: srcDir)
        published(target, in: dstDir)
        logger.info("move: \(path) of \(app) is now \(display(target)); a reference stays in its place")
        return ReferenceAnswer(reference: display(src), target: display(target), item: id, app: app)
    }

    /// ExportToService: a copy in the store; the original stays, no reference.
    public func export(app: String, path: String, to: String, noRename: Bool) throws(DriveError) -> CopyAnswer {
        let (src, fd, st) = try ownDocument(app: app, path: path, verb: "export")
        defer { Sys.close(fd) }
        let dst = try storePlace(to)
        let dstDir = try openFolder(dst.root, dst.rel, shown: display(dst))
        defer { Sys.close(dstDir) }
        let copy = try coordinated(fd, .reading, shown: path) { () throws(DriveError) in
            try copyContent(from: fd, st: st, into: dstDir, shown: display(dst))
        }
        defer { Sys.close(copy) }
        let name = try link(tmp: copy, into: dstDir, names: Self.candidates(src.name), noRename: noRename, shown: display(dst))
        _ = fsync(dstDir)
        let target = Place(root: dst.root, rel: joined(dst.rel, name))
        published(target, in: dstDir)
        return CopyAnswer(copy: display(target), source: display(src), app: app)
    }

    /// `app close`: the app's import copies go.
    public func closeApp(_ app: String) throws(DriveError) -> AppCloseAnswer {
        try requireApp(app)
        return AppCloseAnswer(app: app, removed: try removeImports(app: app))
    }

    /// Removes the recorded import copies (of one app, or all at unmount); returns how many.
    @discardableResult
    public func removeImports(app: String? = nil) throws(DriveError) -> Int {
        var removed = 0
        for (a, name) in try fs.index.imports(app: app) {
            if let inbox = fs.namespace.current().appFolders[a]?["Inbox"] {
                let dfd = Glibc.open(inbox.path, O_RDONLY | Sys.O_DIRECTORY | Sys.O_CLOEXEC)
                if dfd >= 0 {
                    if unlinkat(dfd, name, 0) == 0 { removed += 1 }
                    published(Place(root: inbox, rel: name), in: dfd)
                    Sys.close(dfd)
                }
            }
            try fs.index.removeImport(app: a, name: name)
        }
        return removed
    }

    // MARK: bookmarks

    /// The item a path names, for an app: its own container's documents, or store items it
    /// holds a grant for (a reference stands for its target).
    func itemForApp(_ app: String, _ path: String) throws(DriveError) -> (root: BackingRoot, item: String, rel: String, handle: [UInt8]) {
        let p = try place(path)
        switch try item(at: p, shown: path) {
        case .file(let fd, let st):
            defer { Sys.close(fd) }
            if let owner = p.appID, owner != app {
                throw DriveError(.notFound, "\(path) is in the container of \(owner), not of \(app).")
            }
            let id = try fs.itemID(fd: fd, st: st, root: p.root)
            if p.appID == nil, !fs.hasGrant(app: app, root: p.rootKey, item: id) {
                throw DriveError(.notFound, "App \(app) holds no grant for \(path) (open it with `docdrive open` first).")
            }
            return (p.root, id, p.rel, DriveFileSystem.fileHandle(fd))
        case .reference(let payload):
            guard payload.app == app else { throw DriveError(.notFound, "\(path) is a reference of another app.") }
            let t = try target(of: payload, shown: path)
            defer { Sys.close(t.fd) }
            return (t.root, payload.item, t.rel, DriveFileSystem.fileHandle(t.fd))
        }
    }

    public func createBookmark(app: String, path: String) throws(DriveError) -> BookmarkAnswer {
        try requireApp(app)
        guard let key = fs.driveKey else { throw DriveError(.notFound, "The drive key is missing or unreadable; bookmarks cannot be signed.") }
        let it = try itemForApp(app, path)
        let payload = BookmarkPayload(app: app, root: it.root.key, item: it.item, path: it.rel, created: Date().timeIntervalSince1970,
                                      handle: Data(it.handle).base64EncodedString())
        let token = SignedToken.seal(payload, purpose: .bookmark, key: key)
        return BookmarkAnswer(token: token, path: fs.namespace.displayPath(rootKey: it.root.key, it.rel), item: it.item, app: app)
    }

    public func resolveBookmark(app: String, token: String) throws(DriveError) -> ResolvedBookmark {
        try requireApp(app)
        guard let key = fs.driveKey else { throw DriveError(.notFound, "The drive key is missing or unreadable; bookmarks cannot be checked.") }
        let b = try SignedToken.open(token, as: BookmarkPayload.self, purpose: .bookmark, key: key)
        if let owner = DriveFileSystem.appID(ofRootKey: b.root) {
            guard owner == app else { throw DriveError(.invalidToken, "This bookmark is for a document of another app; \(app) cannot use it.") }
        } else if !fs.hasGrant(app: app, root: b.root, item: b.item) {
            throw DriveError(.invalidToken, "App \(app) holds no grant for the document of this bookmark.")
        }
        guard let root = fs.namespace.root(key: b.root) else {
            throw DriveError(.notFound, "The bookmarked document is gone (its folder is no longer in the drive).")
        }
        let handle = b.handle.flatMap { Data(base64Encoded: $0) }.map { [UInt8]($0) }
        guard let found = fs.locate(root: root, item: b.item, handle: handle, hint: b.path) else {
            throw DriveError(.notFound, "The bookmarked document no longer exists.")
        }
        Sys.close(found.fd)
        return ResolvedBookmark(path: fs.namespace.displayPath(rootKey: root.key, found.path), stale: found.path != b.path,
                                item: b.item, app: app)
    }

    // MARK: grants

    public func listGrants(app: String?) throws(DriveError) -> [GrantRow] {
        if let app { try requireApp(app) }
        return try fs.index.grants(app: app).map { g in
            var row = GrantRow(app: g.app, item: g.item, granted: g.created, path: fs.namespace.displayPath(rootKey: g.root, g.path), status: "missing")
            if let root = fs.namespace.root(key: g.root), let found = fs.locate(root: root, item: g.item, handle: nil, hint: g.path)
                ?? locateAnywhere(root, g.item) {
                Sys.close(found.fd)
                row.path = fs.namespace.displayPath(rootKey: g.root, found.path)
                row.status = "ok"
            }
            return row
        }
    }

    /// Finds an item through any reference entry that points at it (their handles follow renames).
    func locateAnywhere(_ root: BackingRoot, _ item: String) -> (fd: Int32, path: String)? {
        for r in referenceFiles() where r.payload?.item == item {
            if let p = r.payload, let f = fs.locate(root: root, item: item, handle: Data(base64Encoded: p.handle).map { [UInt8]($0) }, hint: p.hint) {
                return f
            }
        }
        return nil
    }

    public func revokeGrant(app: String, path: String) throws(DriveError) -> RevokeAnswer {
        try requireApp(app)
        let p = try place(path)
        let rootKey: String, id: String
        switch try item(at: p, shown: path) {
        case .file(let fd, let st):
            defer { Sys.close(fd) }
            guard p.appID == nil else { throw DriveError(.invalidName, "\(path) is in an app's container; grants are for store documents.") }
            guard let known = try fs.index.knownItemID(root: p.rootKey, ino: Int64(st.st_ino)) else {
                throw DriveError(.notFound, "App \(app) holds no grant for \(path).")
            }
            (rootKey, id) = (p.rootKey, known)
        case .reference(let payload):
            (rootKey, id) = (payload.rootKey, payload.item)
        }
        guard try fs.index.removeGrant(app: app, root: rootKey, item: id) else {
            throw DriveError(.notFound, "App \(app) holds no grant for \(path).")
        }
        fs.setGrant(app: app, root: rootKey, item: id, granted: false)
        return RevokeAnswer(app: app, revoked: path, item: id)
    }

    // MARK: references

    struct ReferenceFile {
        var app: String
        var root: BackingRoot
        /// Shown path inside the root (without the reserved ending).
        var rel: String
        var payload: ReferencePayload?
    }

    /// Every reference file in every container (they are few: one per opened document).
    func referenceFiles() -> [ReferenceFile] {
        var out = [ReferenceFile]()
        for (app, folders) in fs.namespace.current().appFolders {
            for root in folders.values {
                guard let e = FileManager.default.enumerator(atPath: root.path) else { continue }
                while let rel = e.nextObject() as? String {
                    guard ReservedNames.isReference(rel) else { continue }
                    let full = root.path + "/" + rel
                    let dir = (full as NSString).deletingLastPathComponent
                    let dfd = Glibc.open(dir, O_RDONLY | Sys.O_DIRECTORY | Sys.O_CLOEXEC)
                    guard dfd >= 0 else { continue }
                    var payload = ReferenceLink.read(dfd, (full as NSString).lastPathComponent, key: fs.driveKey)
                    Sys.close(dfd)
                    if payload?.app != app { payload = nil }
                    out.append(ReferenceFile(app: app, root: root, rel: String(rel.dropLast(ReservedNames.referenceSuffix.count)), payload: payload))
                }
            }
        }
        return out.sorted { $0.rel < $1.rel }
    }

    /// Every reference entry with its state: ok, missing or invalid.
    public func references() -> [ReferenceRow] {
        referenceFiles().map { r in
            let path = fs.namespace.displayPath(rootKey: r.root.key, r.rel)
            guard let p = r.payload else { return ReferenceRow(app: r.app, path: path, status: ReferenceProblem.invalid.rawValue) }
            if let root = fs.namespace.root(key: p.rootKey),
               let found = fs.locate(root: root, item: p.item, handle: Data(base64Encoded: p.handle).map { [UInt8]($0) }, hint: p.hint) {
                Sys.close(found.fd)
                return ReferenceRow(app: r.app, path: path, status: fs.hasGrant(app: r.app, root: p.rootKey, item: p.item) ? "ok" : ReferenceProblem.revoked.rawValue,
                                    item: p.item, target: fs.namespace.displayPath(rootKey: root.key, found.path))
            }
            return ReferenceRow(app: r.app, path: path, status: ReferenceProblem.missing.rawValue, item: p.item,
                                target: fs.namespace.displayPath(rootKey: p.rootKey, p.hint))
        }
    }
}

extension DriveError {
    /// An app id the config does not have: the modes' sentence, which the picker says too.
    public static func noSuchApp(_ app: String) -> DriveError {
        DriveError(.notFound, "There is no app \"\(app)\" (see `docdrive app list`).")
    }
}
