// StoreSync+Local: the actions on the local copy: downloads, conflict copies, deletes (on either
// side), moves; every change made under a temporary name and renamed into place.
import CDocDriveSys
import Crypto
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

extension StoreSync {
    /// Puts the remote version in place of the local one (or where there is none). The local
    /// copy must still be what the base says (or absent) and not open for writing; else the
    /// remote version becomes a conflict copy.
    func download(_ r: RemoteItem, over local: LocalItem?, base: BaseRow?) throws(DriveError) {
        let cachefd = try openCache()
        defer { close(cachefd) }
        let dir = try openLocalFolder(cachefd, r.path.folder)
        defer { close(dir) }
        let name = r.path.lastName
        switch r.kind {
        case .folder:
            if Beneath.withCName(name, { mkdirat(dir, $0, mode_t(r.meta.mode ?? 0o755) & 0o7777) }) != 0, errno != EEXIST {
                throw DriveError.io("cannot make the folder \(r.path) in the local copy", .init(rawValue: errno))
            }
            guard let st = Beneath.stat(dir, name), st.st_mode & S_IFMT == S_IFDIR else {
                throw DriveError(.io, "\(r.path) is a file in the local copy where the remote has a folder.")
            }
            recordPlaced(dir, r.path, id: r.meta.itemID, replacing: nil)
            told(r.path)
            try bases.put(root: key, BaseRow(path: r.path, id: r.meta.itemID ?? localID(LocalItem(path: r.path, kind: .folder, st: st)),
                                             kind: .folder, localToken: "", remoteToken: r.version))
            try queueChildren(r.path, remoteToo: true)
            return
        case .symlink, .file:
            break
        }
        // On demand, a file comes down as a placeholder unless its content is here already (a
        // file filled before: kept filled), it is pinned, or there is nothing to fetch.
        let asPlaceholder = content == .onDemand && r.kind == .file && r.size > 0
            && (local == nil || local?.placeholder == true) && !isPinned(r.path)
        let tmp = asPlaceholder ? try placeholderFile(r) : try fetch(r)
        var placed = false
        defer {
            close(tmp.fd)
            if !placed { unlink(tmp.path) }
        }
        // The local copy is replaced only as the base knew it, under a writing intent (no
        // process holds a lock on it) and while no one has it open for writing.
        // Opened for writing: a writing intent takes a write lock, which needs it.
        let current = local.flatMap { l -> Int32? in
            l.kind == .file ? Self.openForIntent(dir, name) : nil
        }
        defer { if let current, current >= 0 { close(current) } }
        var placedToken: String?
        let place: () throws -> Void = { [self] in
            let now = Beneath.stat(dir, name)
            let unchanged: Bool = {
                guard let now else { return local == nil }
                // A placeholder is replaced whatever its time says (a fill cut short changed it).
                if now.st_mode & S_IFMT == S_IFREG, Placeholder.isPlaceholder(dir, name) { return true }
                guard let l = local, let b = base else { return false }
                return FolderRemote.version(now) == b.localToken && FolderRemote.version(now) == l.token
            }()
            guard unchanged, !isBusyLocally(local) else {
                throw DriveError(.remoteChanged, "\(r.path) changed here while the remote's version was downloaded.")
            }
            if tmp.item.kind == .symlink {
                var target = [UInt8](repeating: 0, count: Int(tmp.item.size) + 1)
                let n = target.withUnsafeMutableBytes { pread(tmp.fd, $0.baseAddress, $0.count, 0) }
                let linkTmp = Array((".docdrive-link-" + ItemIndex.newID()).utf8)
                let made = Beneath.withCName(target[0..<max(0, n)]) { t in Beneath.withCName(linkTmp) { symlinkat(t, dir, $0) } }
                guard made == 0 else { throw DriveError.io("cannot make the link \(r.path) in the local copy", .init(rawValue: errno)) }
                let moved = Beneath.withCName(linkTmp) { t in Beneath.withCName(name) { renameat(dir, t, dir, $0) } }
                if moved != 0 {
                    let e = errno
                    _ = Beneath.withCName(linkTmp) { unlinkat(dir, $0, 0) }
                    throw DriveError.io("cannot place the link \(r.path) in the local copy", .init(rawValue: e))
                }
            } else {
                // The base takes the placed file's own time and inode, from before it is in
                // place: a process may open it with O_TRUNC the moment it is (and write, and
                // close) before a stat by name would see it, and that change must go up.
                var st = stat()
                guard fstat(tmp.fd, &st) == 0 else { throw DriveError.io("cannot read the download of \(r.path)", .init(rawValue: errno)) }
                placedToken = FolderRemote.version(st)
                // Where nothing was, a file a process made meanwhile is not replaced.
                let flags: UInt32 = now == nil ? UInt32(dd_RENAME_NOREPLACE) : 0
                var moved: Int32 = -1
                var failure: Int32 = 0
                let free = unlessOpenForWriting(now) {
                    moved = Beneath.withCName(name) { dd_renameat2(AT_FDCWD, tmp.path, dir, $0, flags) }
                    failure = moved == 0 ? 0 : errno
                }
                guard free else {
                    throw DriveError(.remoteChanged, "\(r.path) was opened for writing here while the remote's version was downloaded.")
                }
                errno = failure
                if moved != 0, errno == EEXIST {
                    throw DriveError(.remoteChanged, "\(r.path) was made here while the remote's version was downloaded.")
                }
                guard moved == 0 else { throw DriveError.io("cannot place \(r.path) in the local copy", .init(rawValue: errno)) }
                placed = true
            }
            recordPlaced(dir, r.path, id: r.meta.itemID, replacing: now)
        }
        do {
            if let current, current >= 0 {
                try coordinator.coordinate([.init(fd: current, .writing)], timeout: 1.0, place)
            } else {
                try place()
            }
        } catch let e as DriveError where e.code == .busy || e.code == .remoteChanged {
            // Changed, locked or open here: both versions stay. This device has seen the remote
            // version; its own goes over it (and the remote's lives on as the copy).
            logger.info("store \(self.name): \(r.path) is not replaced here: \(e.message)")
            try keepAsConflict(tmp.fd, tmp.path, r, placed: &placed)
            if let l = local {
                try bases.put(root: key, BaseRow(path: r.path, id: base?.id ?? localID(l), kind: l.kind, localToken: "", remoteToken: r.version))
            }
            try? queue.enqueue(root: key, path: r.path, due: 0)
            return
        } catch let e as DriveError {
            throw e
        } catch {
            throw DriveError(.io, "\(error)")
        }
        told(r.path)
        // A conflict copy another device made is one here too (listed, status `conflict`). Its
        // name says whose version it holds (the device that uploaded it kept it).
        if let shown = r.path.string, let c = SyncDecision.conflictCopy(shown) {
            try? bases.addConflict(root: key, ConflictRecord(store: self.name, path: c.original, copy: shown,
                                                             device: c.device, time: Date().timeIntervalSince1970))
        }
        guard let now = Beneath.stat(dir, name), let kind = FolderRemote.kind(now) else { return }
        let id = r.meta.itemID ?? localID(LocalItem(path: r.path, kind: kind, st: now))
        try bases.put(root: key, BaseRow(path: r.path, id: id, kind: kind, localToken: placedToken ?? FolderRemote.version(now), remoteToken: r.version,
                                         parent: r.meta.parent))
        if kind == .file, let id { changes.publish(.remote(.arrived(root: key, path: r.path, id: id, downloaded: !asPlaceholder))) }
    }

    /// Both sides changed: the local copy stays (it is uploaded over the remote version next,
    /// now that this device has seen it) and the remote version is kept beside it as
    /// `NAME (conflict from DEVICE DATE).EXT`, which is synced like any new file.
    func conflict(_ l: LocalItem, _ r: RemoteItem, base: BaseRow?) throws(DriveError) {
        if l.kind == .folder || r.kind == .folder {
            // A folder on one side, a file or link on the other: neither replaces the other.
            // What goes into the folder fails with a sentence naming the file in the way.
            if l.kind != r.kind {
                logger.warning("store \(name): \(l.path) is a \(l.kind) here and a \(r.kind) on the remote; neither replaces the other (rename one of them)")
            }
            return
        }
        let tmp = try fetch(r)
        var placed = false
        defer {
            close(tmp.fd)
            if !placed { unlink(tmp.path) }
        }
        // The same bytes on both sides (made on two devices, or the same change twice): agreed.
        if l.kind == .file, r.kind == .file, let cachefd = try? openCache() {
            defer { close(cachefd) }
            if case .success(let dir) = Beneath.openFolder(cachefd, l.path.folder.names) {
                defer { close(dir) }
                let fd = Beneath.openForReading(dir, l.path.lastName)
                if fd >= 0 {
                    defer { close(fd) }
                    var st = stat()
                    if fstat(fd, &st) == 0, FolderRemote.version(st) == l.token, Self.sameContent(fd, tmp.fd) {
                        if let rid = r.meta.itemID, rid != localID(l) { takeID(rid, for: l) }
                        try bases.put(root: key, BaseRow(path: l.path, id: r.meta.itemID ?? localID(l), kind: .file,
                                                         localToken: l.token, remoteToken: r.version, parent: r.meta.parent))
                        return
                    }
                }
            }
        }
        try keepAsConflict(tmp.fd, tmp.path, r, placed: &placed)
        // This device has now seen the remote version: the local one goes over it.
        try bases.put(root: key, BaseRow(path: l.path, id: localID(l), kind: l.kind, localToken: "", remoteToken: r.version))
        try? queue.enqueue(root: key, path: l.path, due: 0)
    }

    /// Places the downloaded remote version `r` beside the document as a conflict copy.
    func keepAsConflict(_ fd: Int32, _ tmpPath: String, _ r: RemoteItem, placed: inout Bool) throws(DriveError) {
        let who = r.meta.deviceName ?? "another device"
        let cachefd = try openCache()
        defer { close(cachefd) }
        let dir = try openLocalFolder(cachefd, r.path.folder)
        defer { close(dir) }
        // A link's conflict copy is a small file holding its target. Two conflicts of one
        // document in the same second get " 2", " 3"... after the device's name.
        var copy = StorePath(SyncDecision.conflictPath(r.path.description, device: who, date: Date()))
        var n = 1
        while true {
            let moved = Beneath.withCName(copy.lastName) { dd_renameat2(AT_FDCWD, tmpPath, dir, $0, UInt32(dd_RENAME_NOREPLACE)) }
            if moved == 0 { break }
            guard errno == EEXIST, n < 100 else {
                throw DriveError.io("cannot keep the conflict copy \(copy) in the local copy", .init(rawValue: errno))
            }
            n += 1
            copy = StorePath(SyncDecision.conflictPath(r.path.description, device: "\(who) \(n)", date: Date()))
        }
        placed = true
        recordPlaced(dir, copy, id: nil, replacing: nil)
        told(copy)
        try bases.addConflict(root: key, ConflictRecord(store: name, path: r.path.description, copy: copy.description,
                                                        device: who, time: Date().timeIntervalSince1970))
        statusMarks.mark(root: key, path: r.path)
        logger.warning("store \(name): \(r.path) was changed here and on \(who); their version is kept as \(copy)")
        try? queue.enqueue(root: key, path: copy, due: 0)
    }

    /// Deleted here: delete on the remote what is still the version this device saw. A folder
    /// goes once what is in it went (a file changed or added in it elsewhere keeps it).
    func deleteRemote(_ path: StorePath, base: BaseRow) throws(DriveError) -> SyncOutcome {
        if base.kind == .folder {
            let inside = try bases.below(root: key, folder: path)
                .sorted { $0.path.bytes.count > $1.path.bytes.count }
            // A child still waiting to be moved out (its new path's sync moves it, after a
            // rename of this folder) is not something new on the remote: the folder waits for
            // it rather than coming back (as in deleteLocal).
            var waiting = false
            for child in inside where try syncLockedChild(child.path) == .busy { waiting = true }
            if waiting { return .busy }
            do {
                try remote.delete(path, version: "")
            } catch let e where e.code == .remoteChanged {
                // Something new inside on the remote: the folder comes back here.
                if let r = try remote.item(at: path) { try download(r, over: nil, base: nil) }
                return .synced
            }
        } else {
            try remote.delete(path, version: base.remoteToken)
        }
        try bases.remove(root: key, path: path)
        return .removed
    }

    /// A path inside a folder being deleted (this worker holds the folder's lock).
    func syncLockedChild(_ path: StorePath) throws(DriveError) -> SyncOutcome {
        var attempt = 0
        while true {
            do { return try syncOnce(path) } catch let e where e.code == .remoteChanged && attempt < 3 { attempt += 1 }
        }
    }

    /// Deleted on the remote, unchanged here: delete the local copy (under a writing intent).
    /// A folder goes once what is in it went; a new file in it keeps it, and it goes back up.
    func deleteLocal(_ l: LocalItem, base: BaseRow) throws(DriveError) -> SyncOutcome {
        let cachefd = try openCache()
        defer { close(cachefd) }
        guard case .success(let dir) = Beneath.openFolder(cachefd, l.path.folder.names) else { return .removed }
        defer { close(dir) }
        let name = l.path.lastName
        if l.kind == .folder {
            if case .success(let sub) = Beneath.openFolder(dir, [name]) {
                let children = (Beneath.names(sub) ?? []).map { l.path.appending($0.name) }
                close(sub)
                // A child another worker holds (it is being moved out by the sync of its new
                // path) is not a new file: the folder waits for it rather than coming back.
                var waiting = false
                for child in children where try syncLockedChild(child) == .busy { waiting = true }
                if waiting { return .busy }
            }
            if Beneath.withCName(name, { unlinkat(dir, $0, dd_AT_REMOVEDIR) }) != 0 {
                if errno == ENOTEMPTY || errno == EEXIST {
                    // A file made here inside it: the folder stays, and goes back to the remote.
                    logger.info("store \(self.name): \(l.path) was deleted on the remote, but something new is in it here; it stays, and goes back to the remote")
                    var m = meta(id: base.id)
                    m.mode = UInt32(l.st.st_mode & 0o7777)
                    let r = try remote.makeFolder(l.path, meta: m)
                    try bases.put(root: key, BaseRow(path: l.path, id: base.id, kind: .folder, localToken: "", remoteToken: r.version))
                    return .synced
                }
                if errno != ENOENT { throw DriveError.io("cannot remove \(l.path) from the local copy", .init(rawValue: errno)) }
            }
        } else {
            let fd = l.kind == .file ? Self.openForIntent(dir, name) : -1
            defer { if fd >= 0 { close(fd) } }
            let remove: () throws -> Void = { [self] in
                guard let now = Beneath.stat(dir, name), FolderRemote.version(now) == base.localToken, !isBusyLocally(l) else {
                    throw DriveError(.remoteChanged, "\(l.path) changed here; it is not deleted.")
                }
                var removed: Int32 = -1
                var failure: Int32 = 0
                var keptAt: String?
                // A file with content is kept a while (RecentlyDeleted); a placeholder, a link or
                // an empty file holds nothing the remote did not, and goes.
                let keeps = now.st_mode & S_IFMT == S_IFREG && now.st_size > 0 && !l.placeholder
                guard unlessOpenForWriting(now, {
                    if keeps, let at = recentlyDeleted.keep(dir, name, as: l.path) {
                        keptAt = at
                        removed = 0
                        return
                    }
                    if keeps { logger.warning("store \(self.name): \(l.path) cannot be kept in \(recentlyDeleted.folder) (\(String(cString: strerror(errno)))); it is removed") }
                    removed = Beneath.withCName(name) { unlinkat(dir, $0, 0) }
                    failure = removed == 0 ? 0 : errno
                }) else {
                    throw DriveError(.remoteChanged, "\(l.path) was opened for writing here; it is not deleted.")
                }
                guard removed == 0 || failure == ENOENT else {
                    throw DriveError.io("cannot remove \(l.path) from the local copy", .init(rawValue: failure))
                }
                if let keptAt {
                    logger.info("store \(self.name): \(l.path) was deleted on \(remote.displayName); kept for \(RecentlyDeleted.keepDays) days in \(recentlyDeleted.folder)/\(keptAt)")
                    recentlyDeleted.sweep()
                }
            }
            do {
                if fd >= 0 { try coordinator.coordinate([.init(fd: fd, .writing)], timeout: 1.0, remove) } else { try remove() }
            } catch let e as DriveError where e.code == .busy || e.code == .remoteChanged {
                // In use or changed here: the change wins; it goes back up as a new file.
                try bases.remove(root: key, path: l.path)
                try? queue.enqueue(root: key, path: l.path, due: 0)
                return .synced
            } catch let e as DriveError {
                throw e
            } catch {
                throw DriveError(.io, "\(error)")
            }
        }
        recordItem(.removed(root: key, ino: Int64(l.st.st_ino)))
        told(l.path)
        try bases.remove(root: key, path: l.path)
        return .removed
    }

    /// Moves a local item (a rename made on another device), making the new folders.
    func moveLocal(_ from: StorePath, to: StorePath) throws(DriveError) {
        let cachefd = try openCache()
        defer { close(cachefd) }
        guard case .success(let src) = Beneath.openFolder(cachefd, from.folder.names) else { return }
        defer { close(src) }
        let dst = try openLocalFolder(cachefd, to.folder)
        defer { close(dst) }
        let r = Beneath.withCName(from.lastName) { f in Beneath.withCName(to.lastName) { dd_renameat2(src, f, dst, $0, UInt32(dd_RENAME_NOREPLACE)) } }
        guard r == 0 else { throw DriveError.io("cannot move \(from) to \(to) in the local copy", .init(rawValue: errno)) }
        if let st = Beneath.stat(dst, to.lastName) {
            var pst = stat()
            if fstat(dst, &pst) == 0 {
                recordItem(.renamed(root: key, ino: Int64(st.st_ino), parentIno: Int64(pst.st_ino), name: String(decoding: to.lastName, as: UTF8.self)))
            }
        }
        told(from)
        told(to)
    }
}
