// StoreSync+Remote: the actions on the remote: uploads (conditional on the base), their batches'
// commit, uploads a crash left unrecorded, and the queueing of a folder's children.
import CDocDriveSys
import Crypto
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

extension StoreSync {
    // MARK: actions

    func meta(id: String?) -> RemoteMeta {
        RemoteMeta(itemID: id, deviceID: device.id, deviceName: device.name)
    }

    /// Makes the folders above `path` on the remote with their ids (top down), where this
    /// device has no base for them yet: a folder's id travels like a file's.
    func ensureRemoteFolders(_ folder: StorePath) throws(DriveError) {
        guard !folder.isEmpty, try bases.base(root: key, path: folder) == nil else { return }
        // One worker makes it; another that needs it waits, then finds its base. (A worker
        // waits only for a folder at or above its own, so waits never go round in a circle.)
        guard claims.startMaking(folder) else {
            while claims.isMaking(folder) { usleep(2_000) }
            return try ensureRemoteFolders(folder)
        }
        defer { claims.doneMaking(folder) }
        try ensureRemoteFolders(folder.folder)
        guard let l = try localItem(folder), l.kind == .folder else { return }
        let id = localID(l)
        var m = meta(id: id)
        m.mode = UInt32(l.st.st_mode & 0o7777)
        let r = try remote.makeFolder(folder, meta: m)
        if let rid = r.meta.itemID, rid != id { takeID(rid, for: l) }  // another device made it first
        try bases.put(root: key, BaseRow(path: folder, id: r.meta.itemID ?? id, kind: .folder, localToken: "", remoteToken: r.version))
    }

    /// Where the remote holds the item `id` at another path than `path` (where this device's
    /// base or the last listing has it), if it does.
    func placeElsewhere(_ id: String, than path: StorePath) throws(DriveError) -> StorePath? {
        var places = Set<StorePath>()
        if let p = lastListing.path(ofID: id), p != path { places.insert(p) }
        if let b = try baseOfItem(id, elsewhereThan: path) { places.insert(b.path) }
        for p in places where try remote.item(at: p)?.meta.itemID == id { return p }
        return nil
    }

    /// The id a local item goes up with. Over a remote item that is not the one this device
    /// last saw here (another device made it, or put it in the place of the one seen here,
    /// which may live on elsewhere): that item's id, the local version goes on as it. Else
    /// its own, unless the remote holds that id at another path (a file moved here, where it
    /// could not be moved on the remote: another device changed it at its old path, or made an
    /// item under its new name); then the id of what it replaces here, or a new one, and its
    /// old path is decided again on its own (changed there: it stays; else it goes). One id is
    /// never two items on the remote.
    func uploadID(_ l: LocalItem, base: BaseRow?, replacing remoteThere: RemoteItem?) throws(DriveError) -> String? {
        let id = localID(l)
        guard let id, l.kind != .folder else { return id }
        if let rid = remoteThere?.meta.itemID, rid != id, base?.id != rid {
            takeID(rid, for: l)
            return rid
        }
        guard let old = try placeElsewhere(id, than: l.path) else { return id }
        let other = remoteThere?.meta.itemID.flatMap { $0 == id ? nil : $0 } ?? ItemIndex.newID()
        logger.info("store \(name): \(l.path) goes up as another item than \(old) (which could not be moved there)")
        takeID(other, for: l)
        try? queue.enqueue(root: key, path: old, due: 0)
        return other
    }

    /// `knownID`: the id of a file new here (`newHereID`), which no other path has. `batch`: a
    /// small file's upload is made durable and recorded by `commit(batch)`.
    func upload(_ l: LocalItem, base: BaseRow?, remoteThere: RemoteItem?, id knownID: String? = nil, batch: UploadBatch? = nil) throws(DriveError) {
        if l.placeholder {
            throw DriveError(.busy, "\(l.path) is a placeholder here (its content was never downloaded); it is not uploaded.")
        }
        try ensureRemoteFolders(l.path.folder)
        let id: String?
        if let knownID { id = knownID } else { id = try uploadID(l, base: base, replacing: remoteThere) }
        let expecting: RemoteExpectation = remoteThere.map { _ in .version(base?.remoteToken ?? "") } ?? .absent
        switch l.kind {
        case .folder:
            var m = meta(id: id)
            m.mode = UInt32(l.st.st_mode & 0o7777)
            let r = try remote.makeFolder(l.path, meta: m)
            if let rid = r.meta.itemID, rid != id { takeID(rid, for: l) }  // another device made it first
            try bases.put(root: key, BaseRow(path: l.path, id: r.meta.itemID ?? id, kind: .folder, localToken: "", remoteToken: r.version))
            // What is in it on either side (a folder moved in, or made before a crash).
            try queueChildren(l.path, remoteToo: true)
        case .symlink:
            let cachefd = try openCache()
            defer { close(cachefd) }
            guard case .success(let dir) = Beneath.openFolder(cachefd, l.path.folder.names),
                  let target = Beneath.readLink(dir, l.path.lastName) else {
                throw DriveError(.changedDuringUpload, "\(l.path) changed while it was uploaded; it will be uploaded again.")
            }
            close(dir)
            let r = try remote.makeSymlink(target, at: l.path, expecting: expecting, meta: meta(id: id))
            try bases.put(root: key, BaseRow(path: l.path, id: id, kind: .symlink, localToken: l.token, remoteToken: r.version))
        case .file:
            // A file open for writing may be half written (truncated, not yet filled): it goes up
            // once closed (its close queues it), never as a version no process closed.
            if localFiles.hasUnsyncedWrites(l.st) { throw DriveError(.lockedForWriting, "\(l.path) is open for writing") }
            let cachefd = try openCache()
            defer { close(cachefd) }
            guard case .success(let dir) = Beneath.openFolder(cachefd, l.path.folder.names) else {
                throw DriveError(.changedDuringUpload, "\(l.path) changed while it was uploaded; it will be uploaded again.")
            }
            defer { close(dir) }
            let fd = Beneath.openForReading(dir, l.path.lastName)
            guard fd >= 0 else { throw DriveError(.changedDuringUpload, "\(l.path) changed while it was uploaded; it will be uploaded again.") }
            defer { close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0 else { throw DriveError.io("cannot read \(l.path) in the local copy", .init(rawValue: errno)) }
            // The file's mtime and mode travel with it (a download on another device sets them).
            var m = meta(id: id)
            m.mtimeNanoseconds = Timestamp.nanoseconds(st.st_mtim)
            m.mode = UInt32(st.st_mode & 0o7777)
            m.origin = Self.origin(FolderRemote.version(st), at: l.path)
            // A big file's upload takes long: what the batch holds is recorded before it, not after.
            let later = st.st_size <= UploadBatch.smallFile ? batch : nil
            if let batch, later == nil { commit(batch) }
            let r: RemoteItem
            var unflushed: StorePath?
            do {
                (r, unflushed) = try coordinator.coordinate([.init(fd: fd, .reading)], options: .forUploading, timeout: 2.0) {
                    if later == nil {
                        return (try remote.upload(from: fd, to: l.path, expecting: expecting, meta: m, limit: limit) { [progress] d, t in
                            progress(l.path, d, t, .up)
                        }, nil)
                    }
                    return try remote.uploadDurableLater(from: fd, to: l.path, expecting: expecting, meta: m, limit: limit) { [progress] d, t in
                        progress(l.path, d, t, .up)
                    }
                }
            } catch let e as DriveError where e.code == .busy {
                progressDone(l.path)
                throw DriveError(.lockedForWriting, "\(l.path) is locked for writing")
            } catch let e as DriveError {
                progressDone(l.path)
                throw e
            } catch {
                progressDone(l.path)
                throw DriveError(.io, "\(error)")
            }
            progressDone(l.path)
            try probe?.uploaded(l.path.description)
            // Changed while it went up (a remote that streams without checking, S3): the remote
            // holds what was read; this device has seen that version and sends the file again.
            var after = stat()
            if fstat(fd, &after) == 0, FolderRemote.version(after) != FolderRemote.version(st) || after.st_ctim.tv_nsec != st.st_ctim.tv_nsec {
                if let folder = unflushed { try remote.makeDurable([folder]) }
                try bases.put(root: key, BaseRow(path: l.path, id: id, kind: .file, localToken: "", remoteToken: r.version, parent: r.meta.parent))
                throw DriveError(.changedDuringUpload, "\(l.path) changed while it was uploaded; it will be uploaded again.")
            }
            let row = BaseRow(path: l.path, id: id, kind: .file, localToken: FolderRemote.version(st), remoteToken: r.version, parent: r.meta.parent)
            notePossiblyUnlisted(l.path, r)
            if let later, let folder = unflushed {
                later.bases.append(row)
                later.folders.insert(folder)
                later.locked.append(l.path)
            } else {
                try bases.put(root: key, row)
            }
        }
    }

    /// Keeps (or forgets) the upload `r` at `path` among the creates no listing has shown yet (a
    /// create names `RemoteMeta.created` as its parent; a remote that names no parent never has one).
    func notePossiblyUnlisted(_ path: StorePath, _ r: RemoteItem) {
        waits.uploaded(path, version: r.version, isCreate: r.meta.parent == RemoteMeta.created)
    }

    /// Makes the uploads `batch` holds durable on the remote (one flush of each folder they
    /// went into), then records their bases (one transaction), and unlocks their paths. Until
    /// then a crash of the machine could lose an upload whose base says the remote has it (and
    /// the next sync would take the file for deleted on the remote). When the flush or the
    /// record fails, no base is written: each path's entry fails with the reason
    /// (`batch.failures`), and its next sync finds its upload on the remote (`ownUnrecordedUpload`).
    func commit(_ batch: UploadBatch) {
        guard !batch.locked.isEmpty else { return }
        probe?.willCommitUploads(batch.locked.map(\.description))
        do throws(DriveError) {
            try remote.makeDurable(batch.folders)
            try bases.putAll(root: key, batch.bases)
        } catch {
            logger.warning("store \(name): \(batch.locked.count) uploads are not recorded: \(error.message)")
            for p in batch.locked { batch.failures[p] = error.message }
        }
        unlock(batch.locked)
        batch.bases.removeAll()
        batch.folders.removeAll()
        batch.locked.removeAll()
    }

    /// The local version this device uploaded as the remote item `r` at `path`, when a stop
    /// came before its record (`ownUnrecorded`); nil otherwise. Not an item this device knows at
    /// another path: that is its upload moved away and back by another device (a move keeps
    /// the metadata, so the path it was written to matches again), which follows the move.
    ///
    /// Also when the upload's file is gone here since (deleted or renamed before the stop) and
    /// the remote's listing placed it again as a placeholder before its metadata was read
    /// (`placeBeforeMetadata`: the base then has the placeholder's own id, not the remote's).
    /// That placeholder is removed here (the caller holds the path's lock), so that the delete
    /// or the rename goes up.
    func ownUnrecordedUpload(_ path: StorePath, _ r: RemoteItem, local: LocalItem?, base: BaseRow?) throws(DriveError) -> String? {
        let placedAgain = local.map { l in base.map { b in
            l.placeholder && b.remoteToken == r.version && b.localToken == l.token && b.id != r.meta.itemID
        } ?? false } ?? false
        guard let made = Self.ownUnrecorded(r, base: placedAgain ? nil : base, device: device.id),
              dropped.version(at: path) != made else { return nil }
        if let id = r.meta.itemID, try baseOfItem(id, elsewhereThan: path) != nil { return nil }
        if placedAgain, !removeUnchangedPlaceholder(path, of: r, localToken: base?.localToken ?? "") { return nil }
        return made
    }

    /// `RemoteMeta.origin` of an upload of the local version `token` to `path`: the token, a
    /// space, and 16 hex digits of the path's SHA-256 (S3 keeps 2 KB of metadata per object;
    /// a path may be longer).
    static func origin(_ token: String, at path: StorePath) -> String {
        token + " " + FolderRemote.hex(SHA256.hash(data: path.bytes)).prefix(16)
    }

    /// The local version that the remote file `r` was uploaded from, when this device wrote it
    /// at this path and its base does not say so: the device stopped (a crash, a full index
    /// disk) between the remote write and the base's write. That version is one this device
    /// has seen, not another device's change: a delete or a save made here since goes over
    /// it, and nothing comes back. Not when the file was moved or copied here (another device's
    /// move keeps the metadata, the path it was written to says so), nor when its size or time
    /// is not the uploaded one (a program that is not DocDrive editing a remote folder's file
    /// in place keeps its metadata, not its time).
    static func ownUnrecorded(_ r: RemoteItem, base: BaseRow?, device: String) -> String? {
        guard r.kind == .file, r.meta.deviceID == device, let o = r.meta.origin,
              r.version != base?.remoteToken else { return nil }
        let halves = o.split(separator: " ")
        guard halves.count == 2, o == origin(String(halves[0]), at: r.path) else { return nil }
        // "size:seconds.nanoseconds:inode" (FolderRemote.version)
        let parts = halves[0].split(separator: ":")
        guard parts.count == 3, Int64(parts[0]) == r.size else { return nil }
        let time = parts[1].split(separator: ".")
        guard time.count == 2, let sec = Int64(time[0]), let nsec = Int64(time[1]),
              r.meta.mtimeNanoseconds == Timestamp.nanoseconds(seconds: sec, nanoseconds: nsec) else { return nil }
        return String(halves[0])
    }

    /// Queues every path under the folder `path` (a folder just moved): each this device has a
    /// base for, and each there locally without one. A file made in the folder before it was
    /// renamed, whose sync ran under the old name once the rename had taken it away (rsync's
    /// new file, then `mv` of its folder), is known by no base and queued under no other name.
    func requeueInside(_ path: StorePath) throws(DriveError) {
        var known = Set<StorePath>()
        var batch = [(String, StorePath, Double)]()
        for b in try bases.below(root: key, folder: path) {
            known.insert(b.path)
            batch.append((key, b.path, 0))
        }
        let cachefd = try openCache()
        defer { close(cachefd) }
        func walk(_ dfd: Int32, _ folder: StorePath) {
            for e in Beneath.names(dfd) ?? [] where !FolderRemote.isOwnName(e.name) {
                let rel = folder.appending(e.name)
                if !known.contains(rel) { batch.append((key, rel, 0)) }
                if e.type == UInt8(DT_DIR) || e.type == UInt8(DT_UNKNOWN), case .success(let sub) = Beneath.openFolder(dfd, [e.name[...]]) {
                    walk(sub, rel)
                    close(sub)
                }
            }
        }
        if case .success(let dir) = Beneath.openFolder(cachefd, path.names) {
            walk(dir, path)
            close(dir)
        }
        try queue.enqueueAll(batch)
    }

    /// Queues what is in the folder `path` locally (and on the remote) for a sync of its own.
    func queueChildren(_ path: StorePath, remoteToo: Bool) throws(DriveError) {
        let cachefd = try openCache()
        defer { close(cachefd) }
        var batch = [(String, StorePath, Double)]()
        if case .success(let dir) = Beneath.openFolder(cachefd, path.names) {
            for e in Beneath.names(dir) ?? [] where !FolderRemote.isOwnName(e.name) { batch.append((key, path.appending(e.name), 0)) }
            close(dir)
        }
        let name = path.bytes.isEmpty ? 0 : path.bytes.count + 1
        for b in try bases.below(root: key, folder: path) where !b.path.bytes[name...].contains(UInt8(ascii: "/")) {
            batch.append((key, b.path, 0))
        }
        if remoteToo {
            for p in lastListing.inFolder(path) { batch.append((key, p, 0)) }
        }
        try queue.enqueueAll(batch)
    }
}
