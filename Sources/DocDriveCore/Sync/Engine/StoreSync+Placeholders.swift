// StoreSync+Placeholders: content on demand (Placeholder.swift). Filling a placeholder when it
// is opened, freeing a file's space (evict), and the pin marks that keep files here.
import CDocDriveSys
import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension StoreSync {
    /// A fill ended: a failure is the store's download problem in `status` (and offline, when
    /// the remote could not be reached); a success clears it.
    func noteFill(_ path: StorePath, _ failure: DriveError?) {
        guard let failure else {
            status.fillEnded(problem: nil)
            return
        }
        logger.error("store \(name): \(path) could not be downloaded: \(failure.message)")
        status.fillEnded(problem: "\(path): \(failure.message)", unreachable: failure.code == .unreachable,
                         at: Date().timeIntervalSince1970, reason: failure.message)
    }

    /// Makes the placeholders of remote files (and the folders they are in) that are new to
    /// this device (no base, nothing here, an id no base has), in one pass: what a decision of
    /// each would do (download as a placeholder, make the folder), without the queue. A path a
    /// worker holds, one where something is here now, one under a pinned folder (its content
    /// comes down) or one that cannot be placed is left to the queue. Returns the paths placed.
    /// `pending`: items whose metadata is not read yet (RemoteListing): each gets an id of its
    /// own until `completePlaceholders` gives it the remote's.
    func placeNewPlaceholders(_ items: [RemoteItem], pending: Set<StorePath> = [], logging: Bool = true) -> Set<StorePath> {
        guard let cachefd = try? openCache() else { return [] }
        defer { close(cachefd) }
        let folders = LocalFolders(cachefd)  // open local folders
        defer { folders.closeAll() }
        var pinnedFolders = [StorePath: Bool]()
        var placed = Set<StorePath>()
        var rows = [BaseRow]()
        func folder(_ path: StorePath) -> (fd: Int32, ino: Int64)? { folders.open(path) }
        func pinned(_ path: StorePath) -> Bool {
            if let p = pinnedFolders[path] { return p }
            let p = isPinned(path)
            pinnedFolders[path] = p
            return p
        }
        func flush() -> Bool {
            if (try? bases.putAll(root: key, rows)) == nil {
                placed.subtract(rows.map(\.path))
                return false
            }
            rows.removeAll(keepingCapacity: true)
            return true
        }
        // Folders first (shorter paths), so that what is in them has a place.
        let sorted = items.sorted(by: { $0.path.bytes.count < $1.path.bytes.count })
        var from = 0
        var ready = [Prepared?]()
        defer { for case let t? in ready { close(t.fd); unlink(t.path) } }
        for (k, r) in sorted.enumerated() {
            if k == from {
                // The next part's files made beforehand, on several threads (what is left of a
                // part, its files not placed, is removed).
                for case let t? in ready { close(t.fd); unlink(t.path) }
                ready = prepare(sorted[k..<min(k + Self.preparedPart, sorted.count)])
                from = k + Self.preparedPart
            }
            let prepared = ready.isEmpty ? nil : ready[k - (from - Self.preparedPart)]
            if prepared != nil { ready[k - (from - Self.preparedPart)] = nil }
            guard tryLock([r.path]) else {
                if let t = prepared { close(t.fd); unlink(t.path) }
                continue
            }
            defer { unlock([r.path]) }
            // (A file is placed with RENAME_NOREPLACE: a name taken meanwhile fails it.)
            guard let dir = folder(r.path.folder), !pinned(r.path.folder),
                  r.kind != .folder || Beneath.stat(dir.fd, r.path.lastName) == nil else {
                if let t = prepared { close(t.fd); unlink(t.path) }
                continue
            }
            // Its id: the remote's, or a new one (another tool's object), as a download's. No
            // other local item has it (no base does), so none has to learn another.
            let id = r.meta.itemID ?? ItemIndex.newID()
            let name = String(decoding: r.path.lastName, as: UTF8.self)
            var st = stat()
            if r.kind == .folder {
                guard Beneath.withCName(r.path.lastName, { mkdirat(dir.fd, $0, mode_t(r.meta.mode ?? 0o755) & 0o7777) }) == 0,
                      let made = Beneath.stat(dir.fd, r.path.lastName) else { continue }
                st = made
                rows.append(BaseRow(path: r.path, id: id, kind: .folder, localToken: "", remoteToken: r.version))
                recordItem(.created(root: key, ino: Int64(st.st_ino), parentIno: dir.ino, name: name, kind: .directory, id: id))
            } else {
                guard let tmp = prepared ?? (try? placeholderFile(r)) else { continue }
                let moved = Beneath.withCName(r.path.lastName) { dd_renameat2(AT_FDCWD, tmp.path, dir.fd, $0, UInt32(dd_RENAME_NOREPLACE)) }
                let ok = moved == 0 && fstat(tmp.fd, &st) == 0
                close(tmp.fd)
                if moved != 0 { unlink(tmp.path) }
                guard ok else { continue }
                rows.append(BaseRow(path: r.path, id: id, kind: .file, localToken: FolderRemote.version(st), remoteToken: r.version, parent: r.meta.parent))
                recordItem(.created(root: key, ino: Int64(st.st_ino), parentIno: dir.ino, name: name, kind: .file, id: id))
                if let shown = r.path.string, let c = SyncDecision.conflictCopy(shown) {
                    try? bases.addConflict(root: key, ConflictRecord(store: self.name, path: c.original, copy: shown,
                                                                     device: c.device, time: Date().timeIntervalSince1970))
                }
            }
            told(r.path)
            if r.kind == .file, !pending.contains(r.path) { changes.publish(.remote(.arrived(root: key, path: r.path, id: id, downloaded: false))) }
            placed.insert(r.path)
            if rows.count >= 2000, !flush() { return placed }
        }
        guard flush() else { return placed }
        if logging, !placed.isEmpty { logger.info("store \(name): \(placed.count) new items of the remote shown here (files as placeholders)") }
        return placed
    }

    /// A placeholder file made beforehand (`prepare`): open, at a temporary path, for `item`.
    typealias Prepared = (fd: Int32, path: String, item: RemoteItem)

    /// How many items `placeNewPlaceholders` makes the files of at once (each an open
    /// descriptor until it is placed), and on how many threads.
    static let preparedPart = 512
    static let preparingThreads = max(1, min(4, ProcessInfo.processInfo.activeProcessorCount))

    /// The placeholder files of the files among `items`, made in the downloads folder on
    /// several threads, each in a folder of its own; nil for the others, and for all of them
    /// when there are few (a poll's few new items are made one at a time, as they are placed).
    ///
    /// Why: joining a store of 100,000 items is mostly the making of 100,000 files, and a
    /// folder's new entries are made one at a time (the kernel holds the folder's lock while it
    /// finds a free inode; ext4 without a journal also skips the inodes deleted in the last
    /// minute there, which made a join right after another's files were deleted mostly kernel
    /// time). A Python loop making and renaming 40,000 such files took 1.55-1.67 s in one
    /// process and 0.88-0.95 s in two, each with its own folder. Without recently deleted
    /// inodes, a join of 100,000 spends about half of the placing thread's samples in renames
    /// and stats (perf, 2026-11-26).
    func prepare(_ items: ArraySlice<RemoteItem>) -> [Prepared?] {
        let files = items.indices.filter { items[$0].kind == .file }
        guard files.count >= 64, Self.preparingThreads > 1 else { return [] }
        let first = items.startIndex
        let made = Locked<[Prepared?]>(Array(repeating: nil, count: items.count))
        let width = Self.preparingThreads
        S3Parallel.forEach(width, width: width) { w in
            var mine = [(Int, Prepared)]()
            for j in stride(from: w, to: files.count, by: width) {
                if let t = try? self.placeholderFile(items[files[j]], in: Self.placingFolder(w)) {
                    mine.append((files[j] - first, t))
                }
            }
            made.update { for (i, t) in mine { $0[i] = t } }
        }
        return made.value
    }

    /// The first step of a poll of an on-demand store (`listing` from `Remote.listQuickly`):
    /// the new items become placeholders before the metadata of the pending ones is read, with
    /// the listing's size and time and an id of their own, so that a store just joined shows at
    /// once. Not when an item this device knows is gone from the listing: a new item may then
    /// be that item moved by another device, which only its metadata (its id) tells, and it is
    /// placed after it is read, as before. Returns the pending items placed.
    ///
    /// Until `completePlaceholders` runs, such a placeholder is what a placeholder of an object
    /// without DocDrive's metadata (another tool's) is: an item of this device's id, which the
    /// sync takes the remote's id for as soon as a decision reads it (`takeID`); a rename here
    /// moves it on the remote under that id (the base has it), a first open takes the remote's
    /// id and time from the download.
    ///
    /// Memory: the bases are read one row at a time and only a mark per item is kept (at the
    /// start of a device that knows 100,000 items, every item is pending, its HEAD not yet kept:
    /// this step held every base, and a set of their paths and of their ids).
    func placeBeforeMetadata(_ listing: RemoteListing) -> Set<StorePath> {
        let items = listing.items
        var at = [StorePath: Int](minimumCapacity: items.count)
        for (k, i) in items.enumerated() { at[i.path] = k }
        var known = [Bool](repeating: false, count: items.count)
        var allListed = true
        let read: Void? = try? bases.forEach(root: key) { b in
            if let k = at[b.path] { known[k] = true } else { allListed = false }
        }
        guard read != nil, allListed else { return [] }
        // Not an item whose id a base has at another path (it moved here): only its decision
        // knows what to do with it. (A pending item has no id yet: its metadata is not read.)
        let new = items.indices.compactMap { k -> RemoteItem? in
            let i = items[k]
            guard (i.kind == .folder || i.kind == .file && i.size > 0) && !known[k] else { return nil }
            if let id = i.meta.itemID {
                do { if try bases.base(root: key, id: id) != nil { return nil } } catch { return nil }
            }
            return i
        }
        guard !new.isEmpty else { return [] }
        let placed = placeNewPlaceholders(new, pending: listing.pending)
        if !placed.isEmpty { logger.info("store \(name): \(placed.count) items placed before their metadata was read") }
        return placed.intersection(listing.pending)
    }

    /// The placeholders `placeBeforeMetadata` made (`paths`) take their metadata, now read
    /// (`items`): the remote's item id (in the index and the base), mode and time. One that is
    /// no longer the placeholder of the version it stood for (filled by an open, changed,
    /// replaced), one that turned out a link, and one whose id another item here has (a copy
    /// of it, or it moved) are left to their decision, which the poll queues (their id or kind
    /// differs from the base's).
    ///
    /// `at`: each item's place in `items` by path. The bases are read one at a time; what is
    /// kept of each placeholder's is its local version and whether its id is the remote's
    /// (a join of 100,000 items held a map of every base and every item here: over 100 MB).
    func completePlaceholders(_ paths: Set<StorePath>, _ items: [RemoteItem], at: [StorePath: Int]) {
        guard let cachefd = try? openCache() else { return }
        defer { close(cachefd) }
        // The remote ids of the placeholders' items (the items' own strings): an id two of them
        // have is -1 (neither takes it here: their decisions do).
        var itemOfID = [String: Int](minimumCapacity: paths.count)
        for p in paths {
            guard let k = at[p], let rid = items[k].meta.itemID else { continue }
            itemOfID[rid] = itemOfID[rid] == nil ? k : -1
        }
        struct Waiting {
            var item: Int
            var localToken: String
            /// The base's id when the remote item has none (another tool's object).
            var baseID: String?
            var sameID: Bool
        }
        var waiting = [Waiting]()
        var elsewhere = Set<Int>()  // items whose remote id a base at another path has
        let read: Void? = try? bases.forEach(root: key) { b in
            if let id = b.id, let k = itemOfID[id], k >= 0, items[k].path != b.path { elsewhere.insert(k) }
            guard paths.contains(b.path), let k = at[b.path] else { return }
            let r = items[k]
            guard b.kind == r.kind, b.remoteToken == r.version else { return }
            waiting.append(Waiting(item: k, localToken: b.localToken, baseID: r.meta.itemID == nil ? b.id : nil,
                                   sameID: r.meta.itemID == nil || r.meta.itemID == b.id))
        }
        guard read != nil else { return }
        let folders = LocalFolders(cachefd)
        defer { folders.closeAll() }
        func folder(_ path: StorePath) -> (fd: Int32, ino: Int64)? { folders.open(path) }
        var rows = [BaseRow]()
        var done = 0
        func flush() {
            if (try? bases.putAll(root: key, rows)) != nil { done += rows.count }
            rows.removeAll(keepingCapacity: true)
        }
        waiting.sort { items[$0.item].path.bytes.count < items[$1.item].path.bytes.count }
        for w in waiting {
            let r = items[w.item]
            let path = r.path
            if let rid = r.meta.itemID, itemOfID[rid] == -1 || elsewhere.contains(w.item) { continue }
            guard tryLock([path]) else { continue }
            defer { unlock([path]) }
            guard let dir = folder(path.folder) else { continue }
            let name = path.lastName
            // This device's own upload, made before a stop that came before its record, of a
            // file deleted or renamed here since: left to its decision (`syncLocked`), which
            // the poll queues (the base's id is not the remote's).
            if r.kind == .file, Self.ownUnrecorded(r, base: nil, device: device.id) != nil { continue }
            guard let st = Self.takeAttributes(dir.fd, name, r, localToken: r.kind == .file ? w.localToken : nil) else { continue }
            let id = r.meta.itemID ?? w.baseID
            rows.append(BaseRow(path: path, id: id, kind: r.kind, localToken: r.kind == .file ? FolderRemote.version(st) : "",
                                remoteToken: r.version, parent: r.meta.parent))
            if let rid = r.meta.itemID, !w.sameID {
                recordItem(.created(root: key, ino: Int64(st.st_ino), parentIno: dir.ino, name: String(decoding: name, as: UTF8.self),
                                      kind: r.kind == .folder ? .directory : .file, id: rid))
            }
            told(path)
            if r.kind == .file, let id { changes.publish(.remote(.arrived(root: key, path: path, id: id, downloaded: false))) }
            if rows.count >= 2000 { flush() }
        }
        flush()
        logger.info("store \(name): \(done) of \(paths.count) items placed before their metadata took it")
    }

    /// Removes the placeholder at `path` when it is still the one placed for `r` (its version,
    /// and unchanged since: `localToken`); true when it is gone. The caller holds the path's
    /// lock (a first open, which fills it, takes it too).
    func removeUnchangedPlaceholder(_ path: StorePath, of r: RemoteItem, localToken: String) -> Bool {
        guard let cachefd = try? openCache() else { return false }
        defer { close(cachefd) }
        guard case .success(let dir) = Beneath.openFolder(cachefd, path.folder.names) else { return false }
        defer { close(dir) }
        guard let st = Self.unchangedPlaceholder(dir, path.lastName, of: r.version, localToken: localToken),
              Beneath.withCName(path.lastName, { unlinkat(dir, $0, 0) }) == 0 else { return false }
        recordItem(.removed(root: key, ino: Int64(st.st_ino)))
        told(path)
        return true
    }

    /// The stat of the file `name` in the folder `dir` if it is the placeholder of the remote
    /// version `version` and, when `localToken` is given, unchanged since it was placed; nil
    /// otherwise (content arrived, written here, replaced, or not a file).
    static func unchangedPlaceholder(_ dir: Int32, _ name: ArraySlice<UInt8>, of version: String, localToken: String?) -> stat? {
        let fd = Beneath.withCName(name) { openat(dir, $0, dd_O_PATH | dd_O_NOFOLLOW | dd_O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard Placeholder.version(fd: fd) == version, fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG,
              localToken.map({ FolderRemote.version(st) == $0 }) ?? true else { return nil }
        return st
    }

    /// The placeholder `name` in the folder `dir` (or the folder, when `r` is one) takes the
    /// mode and time of the remote item `r` it stands for: only while it is still the
    /// placeholder of `r`'s version and, when `localToken` is given, unchanged since it was
    /// placed. Returns its stat after, nil when it was left alone.
    static func takeAttributes(_ dir: Int32, _ name: ArraySlice<UInt8>, _ r: RemoteItem, localToken: String?) -> stat? {
        if r.kind == .file, unchangedPlaceholder(dir, name, of: r.version, localToken: localToken) == nil { return nil }
        if let m = r.meta.mode {
            _ = Beneath.withCName(name) { fchmodat(dir, $0, mode_t(m & 0o7777), 0) }
        }
        if r.kind == .file, let ns = r.meta.mtimeNanoseconds {
            var times = [timespec(tv_sec: 0, tv_nsec: Int(dd_UTIME_OMIT)),
                         Timestamp.timespec(ns)]
            _ = Beneath.withCName(name) { utimensat(dir, $0, &times, AT_SYMLINK_NOFOLLOW) }
        }
        return Beneath.stat(dir, name)
    }

    /// The placeholder at `path` takes the mode and time of `r` (`takeAttributes`); returns its
    /// local version after, nil when it was left alone.
    func placeholderTakesAttributes(_ path: StorePath, _ r: RemoteItem) -> String? {
        guard let cachefd = try? openCache() else { return nil }
        defer { close(cachefd) }
        guard case .success(let dir) = Beneath.openFolder(cachefd, path.folder.names) else { return nil }
        defer { close(dir) }
        guard let st = Self.takeAttributes(dir, path.lastName, r, localToken: nil) else { return nil }
        told(path)
        return FolderRemote.version(st)
    }

    /// Whether `path` or a folder above it carries the pin mark.
    func isPinned(_ path: StorePath) -> Bool {
        guard let cachefd = try? openCache() else { return false }
        defer { close(cachefd) }
        let names = path.names
        for depth in 0...names.count {
            let fd: Int32
            if depth == 0 {
                fd = dup(cachefd)
            } else if case .success(let dir) = Beneath.openFolder(cachefd, Array(names[0..<depth - 1])) {
                fd = Beneath.withCName(names[depth - 1]) { openat(dir, $0, dd_O_PATH | dd_O_NOFOLLOW | dd_O_CLOEXEC) }
                close(dir)
            } else {
                return false
            }
            guard fd >= 0 else { return false }
            defer { close(fd) }
            if Placeholder.isPinned(fd: fd) { return true }
        }
        return false
    }

    /// Waits (at most `seconds`) until no worker syncs `path`, then holds it.
    private func lockWaiting(_ path: StorePath, seconds: Double) throws(DriveError) {
        let deadline = Date().addingTimeInterval(seconds)
        while !tryLock([path]) {
            guard Date() < deadline else { throw DriveError(.busy, "\(path) is being synced; try again in a moment.") }
            usleep(5_000)
        }
    }

    /// Opens the local file at `path` for reading and writing (never following a link).
    private func openLocalFile(_ path: StorePath) throws(DriveError) -> Int32 {
        let cachefd = try openCache()
        defer { close(cachefd) }
        guard case .success(let dir) = Beneath.openFolder(cachefd, path.folder.names) else {
            throw DriveError(.notFound, "\(path) is no longer in the local copy.")
        }
        defer { close(dir) }
        let fd = Beneath.withCName(path.lastName) { openat(dir, $0, O_RDWR | dd_O_NOFOLLOW | dd_O_CLOEXEC) }
        guard fd >= 0 else {
            if errno == ENOENT { throw DriveError(.notFound, "\(path) is no longer in the local copy.") }
            throw DriveError.io("cannot open \(path) in the local copy", .init(rawValue: errno))
        }
        return fd
    }

    /// The files of `folder` in its listing's order, those small placeholders that may be read
    /// ahead marked (Readahead.swift).
    func filesForReadahead(in folder: StorePath) -> [Readahead.Candidate] {
        guard let cachefd = try? openCache() else { return [] }
        defer { close(cachefd) }
        guard case .success(let dir) = Beneath.openFolder(cachefd, folder.names) else { return [] }
        defer { close(dir) }
        var out = [Readahead.Candidate]()
        for e in Beneath.names(dir) ?? [] where !FolderRemote.isOwnName(e.name) {
            guard let st = Beneath.stat(dir, e.name[...]), st.st_mode & S_IFMT == S_IFREG else { continue }
            let small = st.st_blocks == 0 && st.st_size > 0 && Int64(st.st_size) <= Readahead.smallFile
            out.append(.init(path: folder.appending(e.name), ino: UInt64(st.st_ino),
                             fetch: small && Placeholder.isPlaceholder(dir, e.name[...])))
        }
        return out
    }

    /// Fills the placeholder at `path` with the remote's content, in place: the same inode, so
    /// the kernel's node and the item id stay. Nothing when it is no placeholder (any more).
    /// The attribute goes last: a fill cut short leaves a placeholder. The version the
    /// placeholder stands for is asked for; when the remote has another one now, that one is
    /// the content. `.notFound`: the remote no longer has it (the next sync removes it here).
    /// `times`: told the placeholder's ctime before the first byte is written, and the file's
    /// when it is whole (FilledTimes.swift).
    func hydrate(_ path: StorePath, ahead: Bool = false, times: FilledTimes? = nil) throws(DriveError) {
        try lockWaiting(path, seconds: 120)
        defer { unlock([path]) }
        let fd = try openLocalFile(path)
        defer { close(fd) }
        // One read of the mark: a placeholder of `version`, or filled in an earlier boot.
        guard let raw = Placeholder.rawMark(openFD: fd), case .placeholder(let version) = Placeholder.mark(raw: raw, boot: Placeholder.thisBoot) else { return }
        var before = stat()
        _ = fstat(fd, &before)
        times?.filling(ino: UInt64(before.st_ino), before: before.st_ctim)
        var whole = false
        defer {
            var final = stat()
            times?.filled(ino: UInt64(before.st_ino), after: whole && fstat(fd, &final) == 0 ? final.st_ctim : nil)
        }
        // A download that does not finish leaves a placeholder (its mark goes last), and what
        // it wrote is given back: a disk it filled stays full otherwise.
        defer { if !whole { Self.undoPartialFill(fd, before: before) } }
        // Filled in an earlier boot, and a crash came before its content was known to be on the
        // disk: when that content is whole after all (its MD5 is the version, as an S3 object
        // written in one piece says), it is kept: no download, and it opens offline too.
        if Placeholder.isFilled(raw: raw), Placeholder.contentIs(version, fd: fd, size: Int64(before.st_size)) {
            guard fsync(fd) == 0, Placeholder.clear(openFD: fd) else {
                throw DriveError.io("cannot mark \(path) as downloaded", .init(rawValue: errno))
            }
            logger.info("store \(name): \(path) was downloaded before a restart and is whole: kept, not downloaded again")
            countCached(blocks: before.st_blocks)
            whole = true
            return
        }
        let base = try bases.base(root: key, path: path)
        let report: (Int64, Int64) -> Void = { [progress] done, total in progress(path, done, total, .down) }
        defer { progressDone(path) }
        var got: RemoteItem
        do {
            do {
                got = try remote.download(path, version: version, to: fd, progress: report)
            } catch let e where e.code == .remoteChanged {
                logger.info("store \(name): \(path) changed on the remote since it was listed; its current version is downloaded")
                got = try remote.download(path, version: nil, to: fd, progress: report)
            }
        } catch let e where e.code == .notFound {
            try? queue.enqueue(root: key, path: path, due: 0)
            throw e
        }
        guard got.kind == .file else {
            try? queue.enqueue(root: key, path: path, due: 0)
            throw DriveError(.notFound, "\(path) is no longer a file on the remote.")
        }
        // Each change to the file is an event for the daemon's watches (the kernel's cache, the
        // query index) and a change of its ctime: what is already so is not done again (the
        // placeholder has the remote's size and mostly its mode).
        // The content goes to the disk later, a burst at a time (FillCommits.swift): the mark
        // says "filled in this boot" until then. An fsync here when that cannot be.
        let filled = Placeholder.filledValue(got.version)
        let later = filled != nil && fills.waiting < FillCommits.most
        guard Int64(before.st_size) == got.size || ftruncate(fd, off_t(got.size)) == 0, later || fsync(fd) == 0 else {
            throw DriveError.io("cannot write the download of \(path)", .init(rawValue: errno))
        }
        if let m = got.meta.mode, mode_t(m & 0o7777) != before.st_mode & 0o7777 { _ = fchmod(fd, mode_t(m & 0o7777)) }
        // The remote's id, when the placeholder had one of this device's (placed before its
        // metadata was read, `placeBeforeMetadata`): it takes the remote's id and time now.
        let adopting = got.meta.itemID != nil && got.meta.itemID != base?.id
        // Its modification time is the placeholder's, or the remote's for another version; its
        // access time is now (the cache limit evicts the least recently used first). One call.
        var stamps = [timespec(), before.st_mtim]
        clock_gettime(CLOCK_REALTIME, &stamps[0])
        if !(got.version == version && !adopting), let ns = got.meta.mtimeNanoseconds {
            stamps[1] = Timestamp.timespec(ns)
        }
        _ = futimens(fd, &stamps)
        var after = stat()
        _ = fstat(fd, &after)
        // The base first: a crash before the attribute goes leaves a placeholder at this base.
        try bases.put(root: key, BaseRow(path: path, id: got.meta.itemID ?? base?.id, kind: .file,
                                         localToken: FolderRemote.version(after), remoteToken: got.version, parent: got.meta.parent))
        if adopting, let rid = got.meta.itemID { takeID(rid, for: LocalItem(path: path, kind: .file, st: after)) }
        if later, let filled, Placeholder.setMark(openFD: fd, filled) {
            var now = stat()
            if fstat(fd, &now) != 0 || !fills.add(fd: fd, st: now, mark: filled, times: times) {
                // Not taken (no descriptor left): durable now, as the mark goes.
                guard fsync(fd) == 0 else {
                    let e = errno
                    _ = Placeholder.setMark(openFD: fd, got.version)
                    throw DriveError.io("cannot write the download of \(path)", .init(rawValue: e))
                }
                guard Placeholder.clear(openFD: fd) else {
                    throw DriveError.io("cannot mark \(path) as downloaded", .init(rawValue: errno))
                }
            }
        } else {
            guard (!later || fsync(fd) == 0), Placeholder.clear(openFD: fd) else {
                throw DriveError.io("cannot mark \(path) as downloaded", .init(rawValue: errno))
            }
        }
        if after.st_size != before.st_size { told(path) }
        logger.info("store \(name): downloaded \(path) (\(got.size) bytes) on demand\(ahead ? ", read ahead" : "")")
        countCached(blocks: after.st_blocks)
        whole = true
    }

    /// What a download that did not finish wrote into the open file `fd`, still a placeholder
    /// (`before`: as it was before the download): its blocks are given back, its size and
    /// modification time are the placeholder's again. A placeholder's content is never the
    /// user's (an open for writing fills it first, O_TRUNC makes it the user's empty file), so
    /// nothing of theirs goes; a file whose mark is gone or says "filled" is left alone.
    static func undoPartialFill(_ fd: Int32, before: stat) {
        guard case .placeholder = Placeholder.mark(openFD: fd) else { return }
        var now = stat()
        guard fstat(fd, &now) == 0 else { return }
        if now.st_size != before.st_size { _ = ftruncate(fd, before.st_size) }
        if now.st_blocks > 0 {
            now.st_size = before.st_size
            _ = freeBlocks(fd, now)
        }
        if now.st_mtim.tv_sec != before.st_mtim.tv_sec || now.st_mtim.tv_nsec != before.st_mtim.tv_nsec {
            var times = [before.st_atim, before.st_mtim]
            _ = futimens(fd, &times)
        }
    }

    /// Frees every block of the open file `fd` (`st`: its attributes), keeping its size: a
    /// hole punched over whole blocks (punched to the size, the last partial block would stay
    /// allocated). False, errno set, when the file system cannot.
    static func freeBlocks(_ fd: Int32, _ st: stat) -> Bool {
        let block = off_t(max(512, Int(st.st_blksize)))
        let span = (st.st_size + block - 1) / block * block
        return dd_fallocate(fd, 0x02 | 0x01 /* FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE */, 0, span) == 0
    }

    /// A file's content is here now: its blocks count in the cache's use (when counted).
    private func countCached(blocks: blkcnt_t) {
        status.cacheGrew(by: Int64(blocks) * 512)
    }

    /// Under the store's `cache-limit`: when the content kept here (the blocks of the files
    /// that are not placeholders) is over it, the least recently used clean, closed, unpinned
    /// files are evicted (by access time: a download sets it; reads do as the backing file
    /// system's atime option says), never `keeping` (the file just downloaded).
    func keepUnderCacheLimit(keeping: StorePath) {
        guard let limit = cacheLimit else { return }
        if let use = status.cacheUse, use <= limit { return }
        guard let cachefd = try? openCache() else { return }
        defer { close(cachefd) }
        var kept = [(path: StorePath, bytes: Int64, used: Int)]()
        var total: Int64 = 0
        Self.forEachFile(cachefd, .store) { dfd, name, child, st in
            guard st.st_blocks > 0, !Placeholder.isPlaceholder(dfd, name[...]) else { return }
            let bytes = Int64(st.st_blocks) * 512
            total += bytes
            kept.append((child, bytes, st.st_atim.tv_sec))
        }
        var evicted = 0
        for f in kept.sorted(by: { $0.used < $1.used }) where total > limit && f.path != keeping {
            if let freed = try? evict(f.path), freed > 0 {
                total -= freed
                evicted += 1
            }
        }
        status.cacheCounted(total)
        if evicted > 0 { logger.info("store \(name): evicted \(evicted) file\(evicted == 1 ? "" : "s") to stay under its cache limit (\(total) of \(limit) bytes kept)") }
        if total > limit { logger.warning("store \(name): \(total) bytes kept, over its cache limit of \(limit): what is left is changed, open or pinned") }
    }

    /// Frees the space of the file at `path`: it becomes a placeholder of the version the remote
    /// has (same size, time and inode). Refused, with a sentence, for a file with changes not
    /// uploaded yet, one open through the mount, and a pinned one. Returns the bytes freed.
    func evict(_ path: StorePath) throws(DriveError) -> Int64 {
        try lockWaiting(path, seconds: 10)
        defer { unlock([path]) }
        guard let l = try localItem(path) else { throw DriveError(.notFound, "\(path) is not in store \(name).") }
        guard l.kind == .file else { throw DriveError(.unsupported, "\(path) is not a file; only files are evicted (a folder's files one by one).") }
        if l.placeholder { return 0 }
        guard let b = try bases.base(root: key, path: path), b.kind == .file, b.localToken == l.token else {
            throw DriveError(.busy, "\(path) has changes that are not uploaded yet; it stays on this device.")
        }
        guard !isPinned(path) else { throw DriveError(.busy, "\(path) is pinned (kept on this device); unpin it first.") }
        guard !localFiles.isOpen(dev: UInt64(l.st.st_dev), ino: UInt64(l.st.st_ino)) else {
            throw DriveError(.busy, "\(path) is open; it stays on this device until it is closed.")
        }
        let fd = try openLocalFile(path)
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, FolderRemote.version(st) == b.localToken else {
            throw DriveError(.busy, "\(path) has changes that are not uploaded yet; it stays on this device.")
        }
        let freed = Int64(st.st_blocks) * 512
        // The mark first: a file cut short here is a placeholder (filled again when opened).
        // (Under `transitions`: a "filled" mark going meanwhile must not take this one.)
        guard fills.transitions.withLock({ _ in Placeholder.mark(fd: fd, version: b.remoteToken) }) else {
            throw DriveError.io("cannot mark \(path) as a placeholder", .init(rawValue: errno))
        }
        guard Self.freeBlocks(fd, st) else {
            let e = errno
            Placeholder.clear(fd: fd)
            throw DriveError.io("cannot free the space of \(path)", .init(rawValue: e))
        }
        var times = [st.st_atim, st.st_mtim]
        _ = futimens(fd, &times)
        _ = fsync(fd)
        statusMarks.mark(root: key, path: path)
        // The kernel's cached attributes (its blocks, its ctime) go: `du` shows the space freed,
        // and a program that stats it, opens it (filling it) and stats it again sees one ctime.
        told(path)
        return freed
    }

    /// Sets or clears the pin mark of the file or folder at `path`.
    func setPinned(_ path: StorePath, _ on: Bool) throws(DriveError) {
        let cachefd = try openCache()
        defer { close(cachefd) }
        let fd: Int32
        if path.isEmpty {
            fd = dup(cachefd)
        } else {
            guard case .success(let dir) = Beneath.openFolder(cachefd, path.folder.names) else {
                throw DriveError(.notFound, "\(path) is not in store \(name).")
            }
            fd = Beneath.withCName(path.lastName) { openat(dir, $0, dd_O_PATH | dd_O_NOFOLLOW | dd_O_CLOEXEC) }
            close(dir)
        }
        guard fd >= 0 else { throw DriveError(.notFound, "\(path) is not in store \(name).") }
        defer { close(fd) }
        guard Placeholder.setPinned(fd: fd, on) else {
            throw DriveError.io("cannot \(on ? "pin" : "unpin") \(path)", .init(rawValue: errno))
        }
    }

    /// The files at and under `path` (the empty path: the whole store), each with whether it is
    /// a placeholder and its size.
    func files(under path: StorePath) throws(DriveError) -> [(path: StorePath, placeholder: Bool, size: Int64)] {
        if !path.isEmpty {
            guard let top = try localItem(path) else { throw DriveError(.notFound, "\(path) is not in store \(name).") }
            if top.kind == .file { return [(path, top.placeholder, Int64(top.st.st_size))] }
            guard top.kind == .folder else { return [] }
        }
        let cachefd = try openCache()
        defer { close(cachefd) }
        var out = [(path: StorePath, placeholder: Bool, size: Int64)]()
        guard case .success(let dir) = Beneath.openFolder(cachefd, path.names) else { return [] }
        defer { close(dir) }
        Self.forEachFile(dir, path) { dfd, name, child, st in
            out.append((child, Placeholder.isPlaceholder(dfd, name[...]), Int64(st.st_size)))
        }
        return out
    }

    /// Calls `body` for every regular file at or below the open folder `dfd` (which is `path`),
    /// with its folder, its name, its path and its stat; never following a link.
    static func forEachFile(_ dfd: Int32, _ path: StorePath, _ body: (Int32, [UInt8], StorePath, stat) -> Void) {
        guard let entries = Beneath.names(dfd) else { return }
        for e in entries {
            let child = path.appending(e.name)
            if e.type == UInt8(DT_DIR) {
                let sub = Beneath.withCName(e.name) { Sys.openQuietly(dfd, $0, O_RDONLY | O_DIRECTORY | dd_O_NOFOLLOW | dd_O_CLOEXEC) }
                guard sub >= 0 else { continue }
                forEachFile(sub, child, body)
                close(sub)
            } else if e.type == UInt8(DT_REG), let st = Beneath.stat(dfd, e.name[...]) {
                body(dfd, e.name, child, st)
            }
        }
    }
}

/// The local folders one pass over the placeholders opened (by store path), each opened once;
/// a folder that is not there is remembered as such.
private final class LocalFolders {
    private let cachefd: Int32
    private var opened = [StorePath: (fd: Int32, ino: Int64)]()

    init(_ cachefd: Int32) { self.cachefd = cachefd }

    /// The folder's descriptor and inode number, or nil when it is not there.
    func open(_ path: StorePath) -> (fd: Int32, ino: Int64)? {
        if let f = opened[path] { return f.fd >= 0 ? f : nil }
        var f: (fd: Int32, ino: Int64) = (-1, 0)
        if case .success(let fd) = Beneath.openFolder(cachefd, path.names) {
            var st = stat()
            if fstat(fd, &st) == 0 { f = (fd, Int64(st.st_ino)) } else { close(fd) }
        }
        opened[path] = f
        return f.fd >= 0 ? f : nil
    }

    func closeAll() {
        for f in opened.values where f.fd >= 0 { close(f.fd) }
        opened = [:]
    }
}
