// StoreSync+Path: the sync of one path: the three sides read, renames and moves recognised,
// the decision asked (SyncDecision) and carried out, again while the remote changes under it.
import CDocDriveSys
import Crypto
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

extension StoreSync {
    // MARK: one path

    /// Syncs `path`: reads the three sides, decides, acts. A remote that changed under a
    /// conditional write is read again and decided again (a few times at most). With `batch`,
    /// a file's upload may leave its durability and its record to `commit(batch)` (the path
    /// stays locked until then).
    func sync(_ path: StorePath, batch: UploadBatch? = nil) throws(DriveError) -> SyncOutcome {
        guard tryLock([path]) else { return .busy }
        // (An upload left to the batch put the path last in its `locked`; no other path of a
        // batch can be this one, which tryLock would have refused.)
        defer { if batch?.locked.last != path { unlock([path]) } }
        probe?.willDecide(path.description)
        var attempt = 0
        while true {
            do {
                return try syncOnce(path, firstTry: attempt == 0, batch: batch)
            } catch let e where e.code == .remoteChanged && attempt < 3 {
                attempt += 1
                logger.debug("store \(name): \(e.message) Deciding again.")
            }
        }
    }

    /// The item id of `path` when it is a file made on this device since the remote was last
    /// listed (nil when it is not): no base
    /// here, not in that listing, and its item has no base at another path (it is not a rename).
    /// Its upload is then create-only (S3 `If-None-Match: *`, a folder remote's no-replace
    /// rename) without a look at the remote first, which on S3 is a HEAD and a listing of
    /// `path/` per file: a bulk copy of small files costs one request per file, not three.
    /// Anything written at `path` since refuses the write (`.remoteChanged`) and the path is
    /// decided again with the remote read (`firstTry` false). The one thing S3's condition
    /// does not see is a folder made at that name since the listing (keys under `path/`): a
    /// look leaves the same race between it and the write, and it loses nothing (both stay,
    /// and this device's sync of the path fails naming what is in the way).
    func newHereID(_ path: StorePath, _ local: LocalItem?, _ base: BaseRow?, firstTry: Bool) throws(DriveError) -> String? {
        guard firstTry, base == nil, let l = local, l.kind == .file, !l.placeholder,
              lastListing.wasNotListed(path) == true,
              let id = localID(l), try bases.base(root: key, id: id) == nil,
              lastListing.path(ofID: id) == nil else { return nil }
        return id
    }

    /// Whether the remote was listed (the poll's listing, `lastListing`) since this path was first
    /// found needing it: if not, a poll is asked for, and the path waits for it (`.busy`).
    func listedSinceNoticed(_ path: StorePath) -> Bool {
        let mark = waits.noticed(path)
        // Polls run one at a time: once more have ended than had started, one started since.
        if polls.ended >= mark + 1 { return true }
        polls.want()
        return false
    }

    /// The local item `l` at `path`, where the remote has nothing, is an item the remote has or
    /// had under another path (this device's base, or the last listing, says where): renamed
    /// here. Moves it there (then `base` and `remoteItem` are the moved item's, and nil is
    /// returned: the path is decided as usual), or here when another device moved it elsewhere
    /// too (its name wins, as in SyncDecision). Nil when it is not such an item, when it was
    /// deleted on the remote (it goes up again from here), and when it was changed at its old
    /// path on the remote and here too (it stays there as changed; this one goes up as another
    /// item, `uploadID`).
    func renamedHere(_ path: StorePath, _ l: LocalItem, base: inout BaseRow?, remoteItem: inout RemoteItem?) throws(DriveError) -> SyncOutcome? {
        guard let r = remoteItem else {
            return try renamedHereOntoNothing(path, l, base: &base, remoteItem: &remoteItem)
        }
        // Renamed here onto a name another device took meanwhile: no move, this path is
        // decided as it is (a conflict). The old path's sync may have left it to this one
        // ("that path's sync moves it"): it is decided again, as gone here.
        if let id = try index.knownItemID(root: key, ino: Int64(l.st.st_ino)), base?.id != id,
           let old = try baseOfItem(id, elsewhereThan: path), try localItem(old.path) == nil {
            // Unless the other device's item is this one, moved there the same way (the remote
            // has it here and not at the old path, both looked at now): then this device's base
            // goes along, and the path is decided against the version this device knew (a
            // change made there since is a download, not a conflict).
            if base == nil, old.kind == .file, l.kind == .file, r.meta.itemID == id,
               try remote.item(at: old.path)?.meta.itemID != id {
                guard tryLock([old.path]) else { return .busy }
                defer { unlock([old.path]) }
                try bases.move(root: key, from: old.path, to: path)
                base = try bases.base(root: key, path: path)
                logger.debug("store \(name): \(old.path) was moved to \(path) here and on \(remote.displayName): its base goes along")
                return nil
            }
            try? queue.enqueue(root: key, path: old.path, due: 0)
        }
        return nil
    }

    /// `renamedHere` where the remote has nothing at `path`.
    func renamedHereOntoNothing(_ path: StorePath, _ l: LocalItem, base: inout BaseRow?, remoteItem: inout RemoteItem?) throws(DriveError) -> SyncOutcome? {
        guard let id = localID(l), base?.id != id else { return nil }
        let old = try baseOfItem(id, elsewhereThan: path)
        let listed = lastListing.path(ofID: id)
        guard old != nil || (listed != nil && listed != path) else { return nil }
        if let old {
            // Still there locally as this item, or as the very file the base knows (the mount
            // gave its id to a new file made under the name it was renamed away from, an
            // editor's save, after the rename reached the remote): nothing moved. The file here
            // is another item (`uploadID`), and the one there keeps the id the remote knows.
            if let there = try localItem(old.path), localID(there) == id || there.token == old.localToken { return nil }
            // What is at or under the old path may be syncing now: decided once it is not.
            guard tryLock([old.path]) else { return .busy }
            defer { unlock([old.path]) }
            if let r = try remote.item(at: old.path) {
                guard Self.movesWithRename(r, base: old, renamed: l) else { return nil }
                let moved: RemoteItem
                do {
                    moved = try remote.move(old.path, version: r.version, to: path)
                } catch let e where e.code != .remoteChanged {
                    // A move cut short (S3: copied, then the delete of the source failed) is
                    // finished by the retry of this path, which finds the copy and adopts it: the
                    // old path must be looked at again, or its object stays on the remote. (A
                    // refused condition is decided again, with the bases as they are.)
                    try? queue.enqueue(root: key, path: old.path, due: 0)
                    throw e
                }
                try bases.move(root: key, from: old.path, to: path)
                logger.info("store \(name): moved \(old.path) to \(path) on the remote")
                base = try bases.base(root: key, path: path)
                remoteItem = moved
                // Whatever took the old name since (a new folder, a new file) is its own item,
                // and what moved with a folder is looked at again under its new path (a delete
                // of it decided before the move found nothing there then).
                try? queue.enqueue(root: key, path: old.path, due: 0)
                if moved.kind == .folder { try requeueInside(path) }
                return nil
            }
        }
        // Gone from where this device knew it on the remote: moved by another device too, or
        // deleted there. Which one, a listing made since tells.
        guard listedSinceNoticed(path) else { return .busy }
        guard let to = lastListing.path(ofID: id), to != path, try localItem(to) == nil,
              let r = try remote.item(at: to), r.meta.itemID == id else { return nil }
        guard tryLock([to]) else { return .busy }
        defer { unlock([to]) }
        try moveLocal(path, to: to)
        if let old { try bases.move(root: key, from: old.path, to: to) }
        if r.kind == .folder { try requeueInside(to) }
        logger.info("store \(name): \(path) was moved to \(to) on another device as well; its name there is kept")
        try? queue.enqueue(root: key, path: to, due: 0)
        return .synced
    }

    /// Whether the remote item `r`, at the path of `base`, goes to where the item was renamed
    /// here (`renamed`): it is still the version the base knew, or, when the file was not
    /// changed here, the same item changed on another device (the rename here and the change
    /// there both apply: the change then comes down under the new name). A file renamed and
    /// changed here while changed there stays where it is there.
    static func movesWithRename(_ r: RemoteItem, base: BaseRow, renamed: LocalItem) -> Bool {
        if r.version == base.remoteToken { return true }
        return renamed.token == base.localToken && r.kind == base.kind && r.meta.itemID != nil && r.meta.itemID == base.id
    }

    /// One decision for `path` (its lock held); a path decided is no longer waiting for a listing.
    func syncOnce(_ path: StorePath, firstTry: Bool = false, batch: UploadBatch? = nil) throws(DriveError) -> SyncOutcome {
        let outcome = try syncLocked(path, firstTry: firstTry, batch: batch)
        if outcome != .busy { waits.decided(path) }
        return outcome
    }

    /// The remote item `r`, new at `path` (nothing here, no base), is an item this device has
    /// under another local name that the remote does not have: its old path (the item was
    /// moved on another device) or the name it was given here (renamed on both devices: the
    /// remote's name wins, as in SyncDecision). The local item moves here; then `local` and
    /// `base` are the moved item's and nil is returned (the path is decided as usual).
    func movedThere(_ path: StorePath, _ r: RemoteItem, local: inout LocalItem?, base: inout BaseRow?) throws(DriveError) -> SyncOutcome? {
        guard let id = r.meta.itemID else { return nil }
        let old = try baseOfItem(id, elsewhereThan: path)
        // Where the item is here: the index knows; else at its old path.
        var places = [StorePath]()
        if let rootIno = cacheInode(), let p = try? index.knownPath(id: id, root: key, rootIno: rootIno) { places.append(StorePath(p)) }
        if let old { places.append(old.path) }
        for from in places where from != path {
            guard let l = try localItem(from), l.kind == r.kind, localID(l) == id, try remote.item(at: from) == nil else { continue }
            // Its old path's object must be gone too (a move, not a copy on the remote).
            if let old, old.path != from, try remote.item(at: old.path)?.meta.itemID == id { return nil }
            guard tryLock([from]) else { return .busy }
            defer { unlock([from]) }
            try moveLocal(from, to: path)
            if let old { try bases.move(root: key, from: old.path, to: path) }
            if r.kind == .folder { try requeueInside(path) }
            logger.info("store \(name): \(from) was moved to \(path) on another device; moved here too")
            try? queue.enqueue(root: key, path: from, due: 0)
            local = try localItem(path)
            base = try bases.base(root: key, path: path)
            return nil
        }
        return nil
    }

    /// `dropped` gains `b` (a file's base dropped because the remote no longer has it).
    func noteDropped(_ b: BaseRow) {
        guard b.kind == .file, !b.localToken.isEmpty else { return }
        dropped.note(b.path, version: b.localToken)
    }

    /// Where the file of base `b`, gone from `path` here and on the remote, is now on both: the
    /// listing has its item at that path (and the remote still has, looked at now), and so does
    /// this device's copy, with no base there (this device and another moved it to the same
    /// place). Nil when it is not such a file.
    func sameMoveElsewhere(_ b: BaseRow, from path: StorePath) -> StorePath? {
        guard b.kind == .file, let id = b.id, let to = lastListing.path(ofID: id), to != path,
              (try? bases.base(root: key, path: to)) == nil,
              let l = try? localItem(to), l.kind == .file, !l.placeholder,
              (try? index.knownItemID(root: key, ino: Int64(l.st.st_ino))) == id,
              // the listing may be older than a change since (moved on, or deleted): looked at now
              let there = (try? remote.item(at: to)) ?? nil, there.meta.itemID == id else { return nil }
        return to
    }

    /// The base of the item `id` when it is at another path than `path` (the item moved, here
    /// or on another device, or is known there under another name).
    func baseOfItem(_ id: String, elsewhereThan path: StorePath) throws(DriveError) -> BaseRow? {
        try bases.base(root: key, id: id).flatMap { $0.path != path ? $0 : nil }
    }

    func syncLocked(_ path: StorePath, firstTry: Bool = false, batch: UploadBatch? = nil) throws(DriveError) -> SyncOutcome {
        var local = try localItem(path)
        var base = try bases.base(root: key, path: path)
        let newID = try newHereID(path, local, base, firstTry: firstTry)
        var remoteItem = newID != nil ? nil : try remote.item(at: path)
        // This device's own upload, made before a stop that came before its record: the base
        // takes it, and what changed here since (a delete, a new save) is decided against it.
        if let r = remoteItem, let made = try ownUnrecordedUpload(path, r, local: local, base: base) {
            if local?.placeholder == true { local = try localItem(path) }  // (a placeholder placed again is gone)
            let b = BaseRow(path: path, id: r.meta.itemID ?? base?.id, kind: .file, localToken: made, remoteToken: r.version, parent: r.meta.parent)
            try bases.put(root: key, b)
            base = b
            logger.info("store \(name): \(path): the remote holds this device's upload of it from before a stop; recorded as seen")
        }

        // Renamed here: the local item is an item the remote has (or had) under another path.
        if newID == nil, let l = local, let outcome = try renamedHere(path, l, base: &base, remoteItem: &remoteItem) { return outcome }
        // A placeholder holds nothing of the user's: unchanged here when the base knows it, and
        // not there at all when it does not (a download's leftover, replaced by the next one).
        if let l = local, l.placeholder {
            if let b = base, b.kind == .file { local?.tokenOverride = b.localToken } else { local = nil }
        }
        // A folder here that is another item than the one the base knew (renamed away, and a
        // new one made under its name): what is in either is looked at on its own.
        if let l = local, l.kind == .folder, let b = base, b.kind == .folder, let id = localID(l), b.id != nil, b.id != id {
            try queueChildren(path, remoteToo: true)
            var nb = b
            nb.id = id
            try bases.put(root: key, nb)
        }
        // Gone from the remote while changed here: it may have been moved on another device,
        // after the last listing. It is looked for in a listing made after it was found gone
        // (the change then follows the move below); re-made here before, it would be on the
        // remote twice, under two names with one id.
        if let l = local, l.kind != .folder, let b = base, b.id != nil, remoteItem == nil,
           l.token != b.localToken || isBusyLocally(l), !listedSinceNoticed(path) {
            return .busy
        }
        // Renamed on another device: nothing here on the remote, but the item is elsewhere there.
        if remoteItem == nil, local != nil, let b = base, let id = b.id, let to = lastListing.path(ofID: id), to != path,
           let r = try remote.item(at: to), r.meta.itemID == id, try localItem(to) == nil {
            guard tryLock([to]) else { return .busy }
            defer { unlock([to]) }
            try moveLocal(path, to: to)
            try bases.move(root: key, from: path, to: to)
            if r.kind == .folder { try requeueInside(to) }
            logger.info("store \(name): \(path) was moved to \(to) on another device; moved here too")
            try? queue.enqueue(root: key, path: to, due: 0)
            return .synced
        }
        // The same from the new name's side.
        if local == nil, base == nil, let r = remoteItem, let outcome = try movedThere(path, r, local: &local, base: &base) {
            return outcome
        }

        // Gone here because it was renamed: the new name's sync moves it on the remote (a
        // delete here would lose the item's id on the other devices).
        if local == nil, let b = base, let id = b.id, let r = remoteItem, let rootIno = cacheInode(),
           let p = try? index.knownPath(id: id, root: key, rootIno: rootIno), StorePath(p) != path,
           try bases.base(root: key, path: StorePath(p)) == nil, try remote.item(at: StorePath(p)) == nil,
           let there = try localItem(StorePath(p)), localID(there) == id, Self.movesWithRename(r, base: b, renamed: there) {
            logger.debug("store \(name): \(path) was renamed here to \(p): that path's sync moves it")
            try? queue.enqueue(root: key, path: StorePath(p), due: 0)
            // This path is looked at again until that sync has moved it (its base goes with the
            // item): the file may be renamed on or deleted before that, or the new name taken
            // on the remote, and then this path is decided as gone here.
            return .busy
        }
        var syncBase = base?.base
        if let b = base, b.kind == .file, waits.unlistedCreate(at: path) == b.remoteToken { syncBase?.unlistedCreate = true }
        let item = SyncItem(local: local?.entry, base: syncBase,
                            // (The version a remote version was written over: for a version of the
                            // base's item only; another item moved here tells nothing about the
                            // base's, but for whether it was a create.)
                            remote: remoteItem.map { SyncEntry(path: $0.path.description, kind: $0.kind, token: $0.version,
                                                               parent: $0.meta.itemID != nil && $0.meta.itemID == base?.id ? $0.meta.parent
                                                                   : $0.meta.parent == RemoteMeta.created ? RemoteMeta.created : nil) },
                            localBusy: isBusyLocally(local), localIsPlaceholder: local?.placeholder ?? false)
        let plan = SyncDecision.decide(item)
        logger.debug("store \(name): \(path): local \(local?.token ?? "-") base \(base?.localToken ?? "-")/\(base?.remoteToken ?? "-") remote \(remoteItem?.version ?? "-"): \(plan) (ids \(local.flatMap { try? index.knownItemID(root: key, ino: Int64($0.st.st_ino)) } ?? "-") \(base?.id ?? "-") \(remoteItem?.meta.itemID ?? "-"))")
        switch plan.action {
        case .none:
            // One item, one id on every device: the remote's id is the item's.
            if let l = local, let r = remoteItem, let rid = r.meta.itemID, rid != localID(l) {
                takeID(rid, for: l)
                if var b = base {
                    b.id = rid
                    // A placeholder of an id of this device's (placed before its metadata was
                    // read, and renamed here meanwhile) takes the remote's mode and time too.
                    if l.placeholder, r.kind == .file, let token = placeholderTakesAttributes(path, r) { b.localToken = token }
                    try bases.put(root: key, b)
                }
            }
            return .synced
        case .adopt:
            let l = local!
            var r = remoteItem!
            // A folder the remote made on the way to a file moved or uploaded into it has no id:
            // it is given this device's, so that a rename of it elsewhere arrives as a rename.
            if l.kind == .folder, r.meta.itemID == nil, let id = localID(l) {
                var m = meta(id: id)
                m.mode = UInt32(l.st.st_mode & 0o7777)
                r = try remote.makeFolder(path, meta: m)
            }
            if let rid = r.meta.itemID, rid != localID(l) { takeID(rid, for: l) }
            try bases.put(root: key, BaseRow(path: path, id: r.meta.itemID ?? localID(l), kind: l.kind, localToken: l.token, remoteToken: r.version,
                                             parent: r.meta.parent))
            return .synced
        case .upload:
            try upload(local!, base: base, remoteThere: remoteItem, id: newID, batch: batch)
            return .synced
        case .download:
            try download(remoteItem!, over: local, base: base)
            return .synced
        case .deleteRemote:
            return try deleteRemote(path, base: base!)
        case .deleteLocal:
            noteDropped(base!)
            return try deleteLocal(local!, base: base!)
        case .forget:
            // Gone here and there: deleted on both, or moved on both (where to, a listing made
            // since it was found gone tells; see sameMoveElsewhere).
            if let b = base, b.kind == .file, b.id != nil, !listedSinceNoticed(path) { return .busy }
            if let b = base, let to = sameMoveElsewhere(b, from: path) {
                guard tryLock([to]) else { return .busy }
                defer { unlock([to]) }
                if try bases.base(root: key, path: to) == nil {
                    try bases.move(root: key, from: path, to: to)
                    logger.debug("store \(name): \(path) was moved to \(to) here and on \(remote.displayName): its base goes along")
                    try? queue.enqueue(root: key, path: to, due: 0)
                    return .removed
                }
            }
            if let b = base { noteDropped(b) }
            try bases.remove(root: key, path: path)
            return .removed
        case .conflict:
            if let b = item.base, let r = item.remote, !item.localBusy, SyncDecision.replacedUnseen(b, r) {
                logger.warning("store \(name): \(path): the version this device last saw on \(remote.displayName) was replaced by \(remoteItem!.meta.deviceName ?? "another device")'s, written at the same moment over the version before it (the server let both writes succeed); both are kept")
            } else if let b = item.base, let r = item.remote, !item.localBusy, SyncDecision.createdOver(b, r) {
                logger.warning("store \(name): \(path): this device's new file was replaced on \(remote.displayName) by \(remoteItem!.meta.deviceName ?? "another device")'s, made at the same moment under the same name (the server let both creates succeed); both are kept")
            }
            if item.base?.unlistedCreate == true { waits.forgetCreate(at: path) }
            try conflict(local!, remoteItem!, base: base)
            return .synced
        }
    }
}
