// StoreSync+Poll: looking at both sides: the poll of the remote against the bases, the comparison
// of the local copy with them, duplicate ids healed, leftovers of downloads and conflicts removed.
import CDocDriveSys
import Crypto
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

extension StoreSync {
    // MARK: looking at both sides

    /// Lists the remote and queues every path where it differs from the bases (changed, new,
    /// gone, moved). A remote that cannot be listed changes nothing: the store is offline.
    @discardableResult
    func poll() -> Int { finishPoll(startPoll(placingEarly: false)) }

    /// A poll begun: the remote's first listing step (RemoteListing), and the placeholders
    /// made from it.
    /// `finishPoll` takes what it holds (once): the first poll's start is held by the poller
    /// thread for as long as it runs, and must not keep a listing of every item (a store of
    /// 100,000: about 40 MB) for the life of the mount.
    final class PollStart: Sendable {
        private let held: Mutex<(listing: Result<RemoteListing, DriveError>, early: Set<StorePath>)?>
        /// Whether placeholders were made before the metadata was read.
        let placedEarly: Bool
        /// How many items the rest of the poll looks up (S3: a HEAD each) before it compares.
        let lookups: Int
        /// The remote's fingerprint taken before the listing (nil: the remote has none).
        let fingerprint: [UInt8]?
        /// The fingerprint and the bases were those of the last poll that found nothing: there
        /// is no listing, and nothing to compare.
        let unchanged: Bool
        /// A reading of the remote's journal, instead of a listing (`Remote.keepsJournal`).
        let journal: JournalPage?
        /// For a listing of a remote that keeps a journal: the remote's time before it (the
        /// journal is read from there on).
        let journalStart: Int64?

        fileprivate init(listing: Result<RemoteListing, DriveError>, early: Set<StorePath>, fingerprint: [UInt8]? = nil,
                         journalStart: Int64? = nil) {
            lookups = (try? listing.get().pending.count) ?? 0
            held = Mutex((listing, early))
            placedEarly = !early.isEmpty
            self.fingerprint = fingerprint
            unchanged = false
            journal = nil
            self.journalStart = journalStart
        }

        fileprivate init(unchangedAt fingerprint: [UInt8]) {
            lookups = 0
            held = Mutex(nil)
            placedEarly = false
            self.fingerprint = fingerprint
            unchanged = true
            journal = nil
            journalStart = nil
        }

        fileprivate init(journal: JournalPage, fingerprint: [UInt8]) {
            lookups = 0
            held = Mutex(nil)
            placedEarly = false
            self.fingerprint = fingerprint
            unchanged = false
            self.journal = journal
            journalStart = nil
        }

        fileprivate func take() -> (listing: Result<RemoteListing, DriveError>, early: Set<StorePath>)? {
            held.withLock { h in
                defer { h = nil }
                return h
            }
        }
    }

    /// The first step of a poll: the listing alone (S3: the keys, without a HEAD each). With
    /// `placingEarly` (the first poll at the mount), on demand, what is new on the remote (a
    /// store just joined: all of it) shows at once, as placeholders, before each item's
    /// metadata is read (`placeBeforeMetadata`): the daemon mounts after this step, and
    /// `finishPoll` does the rest. (A later poll places what is new with its metadata read:
    /// a few items, and nobody waits for it.)
    func startPoll(placingEarly: Bool) -> PollStart {
        polls.start()
        // What this device wrote and has not told (a write of the poller's own, a batch whose
        // announcement failed, a stop before it): told before looking, once for all.
        remote.announce()
        do {
            guard placingEarly, content == .onDemand else {
                let fingerprint = try remote.fingerprint()
                let generation = bases.generation
                if let fingerprint {
                    switch lastListing.nextPoll(fingerprint: fingerprint, bases: generation, now: Date().timeIntervalSince1970) {
                    case .quiet: return PollStart(unchangedAt: fingerprint)
                    case .journal(let cursor):
                        if let page = readJournal(after: cursor) { return PollStart(journal: page, fingerprint: fingerprint) }
                    case .whole: break
                    }
                }
                // The journal is read from the time before the listing (the fingerprint's answer
                // gave it).
                let journalStart = remote.keepsJournal ? try remote.journalTime() : nil
                return PollStart(listing: .success(noteUnshown(try remote.listQuickly())), early: [], fingerprint: fingerprint,
                                 journalStart: journalStart)
            }
            let journalStart = remote.keepsJournal ? try remote.journalTime() : nil
            if (try? bases.count(root: key)) == 0 {
                // Nothing known here yet (a store just joined): every item is new, and each
                // part of the listing becomes placeholders while the next one comes.
                var early = Set<StorePath>()
                var shown = 0
                let listing = try remote.listQuickly { items, pending in
                    let new = items.filter { $0.kind == .folder || $0.kind == .file && $0.size > 0 }
                    guard !new.isEmpty else { return }
                    let placed = placeNewPlaceholders(new, pending: pending, logging: false)
                    shown += placed.count
                    early.formUnion(placed.intersection(pending))
                }
                noteUnshown(listing)
                if shown > 0 { logger.info("store \(name): \(shown) new items of the remote shown here (files as placeholders)") }
                if !early.isEmpty { logger.info("store \(name): \(early.count) items placed before their metadata was read") }
                return PollStart(listing: .success(listing), early: early, journalStart: journalStart)
            }
            let listing = noteUnshown(try remote.listQuickly())
            let early = listing.pending.isEmpty ? [] : placeBeforeMetadata(listing)
            return PollStart(listing: .success(listing), early: early, journalStart: journalStart)
        } catch {
            return PollStart(listing: .failure(error), early: [])
        }
    }

    /// The journal after `cursor`, nil when it cannot be read or asks for a whole listing (said
    /// once per reason; the poll then lists the whole remote). A remote that cannot be reached
    /// throws as its listing would.
    func readJournal(after cursor: JournalCursor) -> JournalPage? {
        let page: JournalPage
        do {
            page = try remote.readJournal(after: cursor)
        } catch {
            logger.debug("store \(name): the journal cannot be read (\(error.message)); listing the store instead")
            lastListing.journalBroken(cursor: cursor)
            return nil
        }
        if let u = page.unreadable {
            logger.warning("store \(name): the journal object \(u.key) on \(remote.displayName) cannot be used: \(u.why); the store is listed whole instead")
            lastListing.journalBroken(cursor: page.cursor)
            return nil
        }
        if let w = page.batches.first(where: { $0.batch.whole }) {
            logger.debug("store \(name): \(w.batch.deviceName ?? w.batch.device) wrote what it could not name (a stop of its last run): the store is listed whole")
            lastListing.journalBroken(cursor: page.cursor)
            return nil
        }
        return page
    }

    /// Logs the objects a listing leaves unshown, once each time their number changes.
    @discardableResult
    func noteUnshown(_ listing: RemoteListing) -> RemoteListing {
        let n = listing.unshownCount
        guard lastListing.noteUnshown(n), n > 0 else { return listing }
        let some = listing.unshown.map { "\"" + $0.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? "\\u{\(String($0.value, radix: 16))}" : String($0) }.joined() + "\"" }
        logger.warning("store \(name): \(n) object\(n == 1 ? "" : "s") on \(remote.displayName) \(n == 1 ? "has a name" : "have names") with a control character that another tool wrote as it is (\(some.joined(separator: ", "))\(n > some.count ? ", ..." : "")); DocDrive writes such names escaped, so \(n == 1 ? "it is" : "they are") not shown here and left on the remote untouched (rename \(n == 1 ? "it" : "them") there to show \(n == 1 ? "it" : "them"))")
        return listing
    }

    /// The rest of a poll begun by `startPoll` (polls run one at a time: one poll's two steps
    /// are never apart by another poll).
    ///
    /// Memory: a store of 100,000 items is compared with its bases without a map of each side.
    /// The items are indexed by path (their place in the listing) and by id (the items' own
    /// strings), and the bases are read one row at a time (`BaseVersions.forEach`), each
    /// compared with its item as it comes; what is left is a mark per item.
    @discardableResult
    func finishPoll(_ start: PollStart) -> Int {
        defer { polls.end(quiet: start.unchanged) }
        if start.unchanged {
            status.polledUnchanged(at: Date().timeIntervalSince1970)
            return 0
        }
        if let page = start.journal, let fingerprint = start.fingerprint { return finishJournalPoll(page, fingerprint: fingerprint) }
        // Kept again below only if this poll finds nothing to do.
        lastListing.forgetQuiet()
        let items: [RemoteItem]
        let early: Set<StorePath>
        do {
            guard let (listed, placed) = start.take() else { return 0 }
            early = placed
            items = try remote.complete((consume listed).get())  // the listing's items completed in place
        } catch {
            let now = Date().timeIntervalSince1970
            let wasOnline = status.unreachable(at: now, error.message)
            if wasOnline {
                logger.warning("store \(name): offline: \(error.message)")
                statusMarks.changes.changed()  // `status --watch` shows it (back online, makeDue writes the queue)
            }
            return 0
        }
        var at = [StorePath: Int](minimumCapacity: items.count)
        var byID = [String: StorePath]()
        var several = [String: [RemoteItem]]()
        for (k, i) in items.enumerated() {
            at[i.path] = k
            if let id = i.meta.itemID {
                if let first = byID[id], let f = at[first].map({ items[$0] }), f.kind != .folder, i.kind != .folder {
                    several[id, default: [f]].append(i)
                }
                byID[id] = i.path
            }
        }
        if !early.isEmpty { completePlaceholders(early, items, at: at) }
        let wasOffline = status.polled(at: Date().timeIntervalSince1970,
                                       devices: RemoteState.deviceNames(items.lazy.map(\.meta)))  // no copy of every item's metadata
        if wasOffline {
            logger.info("store \(name): the remote answers again")
            _ = try? queue.makeDue(.all, root: key)
        }
        // Kept: the ids in 16 bytes each, not the listing's strings.
        let wholeDue = Date().timeIntervalSince1970 + reconcile
        lastListing.listed(ids: ListedIDs(byID: byID), paths: Set(items.map(\.path.hashValue)),
                           journal: start.journalStart.map { (JournalCursor.listed(at: $0), wholeDue) })
        waits.listed(items, at: at, done: polls.ended)
        let healed = healDuplicateIDs(several, now: Date().timeIntervalSince1970)
        // Ids at several paths are healed by listings (after `DuplicateIDs.grace`): the next
        // poll lists again, whatever the fingerprint or the journal says.
        if !several.isEmpty { lastListing.wantWhole() }
        var changed = Set<StorePath>()
        // Per item: whether a base has its path; the ids of the items that a base has too.
        var known = [Bool](repeating: false, count: items.count)
        var knownIDs = Set<String>()
        let basesRead = bases.generation
        let compared: Void? = try? bases.forEach(root: key) { b in
            if let id = b.id, let p = byID[id], let k = at[p], let rid = items[k].meta.itemID { knownIDs.insert(rid) }
            if let k = at[b.path] {
                known[k] = true
                let r = items[k]
                // Another item id with the same version: another item with the same bytes (S3's
                // version is the content's MD5), whose id this device must take.
                if r.version != b.remoteToken || r.kind != b.kind || r.meta.itemID.map({ $0 != b.id }) ?? false { changed.insert(b.path) }
                // Its id now elsewhere only (an id healed at this path, `healDuplicateIDs`): the
                // item there takes it here too (a download of this one may have taken it).
                if let id = b.id, r.meta.itemID != id, let p = byID[id], p != b.path { changed.insert(p) }
            } else {
                changed.insert(b.path)
                if let id = b.id, let to = byID[id] { changed.insert(to) }
            }
        }
        guard compared != nil else { return 0 }
        for k in items.indices where !known[k] { changed.insert(items[k].path) }
        changed.formUnion(healed)
        // On demand, the files that are new here (a store just joined: all of them) become
        // placeholders at once, without a decision each.
        var placedNew = false
        if content == .onDemand {
            let new = items.indices.compactMap { k -> RemoteItem? in
                let i = items[k]
                // (This device's own upload that a stop kept from its record is decided instead.)
                guard (i.kind == .folder || i.kind == .file && i.size > 0) && !known[k]
                        && !(i.meta.itemID.map { knownIDs.contains($0) } ?? false)
                        && Self.ownUnrecorded(i, base: nil, device: device.id) == nil else { return nil }
                return i
            }
            if !new.isEmpty {
                changed.subtract(placeNewPlaceholders(new))
                placedNew = true
            }
        }
        let now = Date().timeIntervalSince1970
        // Folders first: a new folder is made before what goes in it.
        let batch = changed.sorted { $0.bytes.count < $1.bytes.count }.map { (key, $0, now) }
        try? queue.enqueueAll(batch, keepingRetries: true)
        if let fingerprint = start.fingerprint, batch.isEmpty, !placedNew, several.isEmpty, early.isEmpty, !wasOffline {
            lastListing.foundNothing(fingerprint: fingerprint, bases: basesRead,
                                     wholeDue: remote.fingerprintSeesEveryWriter ? nil : wholeDue)
        }
        return batch.count
    }

    /// The rest of a poll that read the journal: every path its new objects name is decided
    /// again (with the folders above a new one that have no base, and the folder of a delete,
    /// which may be gone with it); the listing's memory takes what they say. The fingerprint
    /// read before the journal ends the next polls quietly until it changes.
    func finishJournalPoll(_ page: JournalPage, fingerprint: [UInt8]) -> Int {
        let now = Date().timeIntervalSince1970
        if status.polledJournal(at: now) {
            logger.info("store \(name): the remote answers again")
            _ = try? queue.makeDue(.all, root: key)
        }
        let changes = page.batches.flatMap(\.batch.changes)
        // An id the journal puts at a path while it is still at another (two devices' changes
        // crossed: a write at a path another device was moving away) may now be at both: only a
        // listing finds and heals that (`healDuplicateIDs`), so the next poll lists.
        var idAt = [String: StorePath]()
        var crossed: StorePath?
        for c in changes where c.op != .delete {
            guard let id = c.id else { continue }
            if crossed == nil, let q = idAt[id] ?? lastListing.path(ofID: id), q != c.path, q != c.from { crossed = c.path }
            idAt[id] = c.path
        }
        if let crossed {
            logger.debug("store \(name): the journal puts at \(crossed) an item id that is elsewhere too: the next poll lists the store")
            lastListing.wantWhole()
        }
        lastListing.journaled(changes, cursor: page.cursor)
        var named = [StorePath: String?]()
        var changed = Set<StorePath>()
        for c in changes {
            for p in c.paths {
                changed.insert(p)
                named[p] = c.op == .delete || p == c.from ? String?.none : c.version
                var folder = p.folder
                while !folder.bytes.isEmpty, !changed.contains(folder), (try? bases.base(root: key, path: folder)) ?? nil == nil {
                    changed.insert(folder)
                    folder = folder.folder
                }
            }
            if c.op == .delete || c.op == .move, let gone = c.from ?? (c.op == .delete ? c.path : nil), !gone.folder.bytes.isEmpty {
                changed.insert(gone.folder)
            }
        }
        waits.journaled(named: named, done: polls.ended)
        let batch = changed.sorted { $0.bytes.count < $1.bytes.count }.map { (key, $0, now) }
        try? queue.enqueueAll(batch, keepingRetries: true)
        if !changes.isEmpty {
            logger.debug("store \(name): the journal names \(changes.count) change\(changes.count == 1 ? "" : "s") of other devices: \(batch.count) path\(batch.count == 1 ? "" : "s") to decide")
        }
        lastListing.foundNothing(fingerprint: fingerprint, bases: bases.generation, wholeDue: lastListing.journalWholeDue)
        return batch.count
    }

    /// One item id at several paths on the remote: two devices' changes crossed where the
    /// remote has no transaction over two keys (S3: one device moved a file by a new upload
    /// under its new name while another wrote its change at the old one). Every path but the
    /// first (in byte order) becomes an item of its own, with an id derived from the old id and
    /// its path, so that devices that heal at once write the same. Only ids listed at the same
    /// paths for `duplicateGrace` seconds (a move between its copy and its delete is not
    /// healed). Returns the paths to decide again (each device then takes the new id).
    func healDuplicateIDs(_ found: [String: [RemoteItem]], now: Double) -> [StorePath] {
        let due = lastListing.duplicatesDue(found, now: now, grace: DuplicateIDs.grace)
        var healed = [StorePath]()
        for (id, items) in due {
            let sorted = items.sorted { $0.path.bytes.lexicographicallyPrecedes($1.path.bytes) }
            for r in sorted.dropFirst() {
                // A path syncing now is healed at a later listing.
                guard tryLock([r.path]) else { continue }
                defer { unlock([r.path]) }
                var m = r.meta
                m.itemID = DuplicateIDs.derived(id, at: r.path)
                do {
                    _ = try remote.reassign(r.path, version: r.version, meta: m)
                    logger.info("store \(name): \(r.path) had the item id of \(sorted[0].path) on the remote (two devices' changes crossed); it is an item of its own now")
                    // Both paths are decided again: the first keeps the id here too (a download
                    // of the other may have taken it on this device).
                    healed += [r.path, sorted[0].path]
                } catch {
                    logger.debug("store \(name): \(r.path) keeps the item id of \(sorted[0].path) for now: \(error.message)")
                }
            }
        }
        if !healed.isEmpty { lastListing.forgetDuplicates(at: healed) }
        return healed
    }

    /// At start: queues every local path that differs from its base (saved while not mounted,
    /// or a save a crash kept out of the queue), and every base whose local copy is gone.
    /// `docdrive sync` runs it too, with `unexpected`: then only the paths it says yes to (those
    /// with nothing waiting) are queued, each after a second look at its base (the one read at
    /// the start may be older than an upload that ended during the walk), and a folder without
    /// a base is left to its files' uploads (it is made on the remote with the first). Returns
    /// how many paths were queued. The local copy is walked in the bases' order (PathOrderWalk,
    /// BasesInOrder): no map of every base is held.
    @discardableResult
    func compareLocal(unexpected: ((StorePath) -> Bool)? = nil, stopped: () -> Bool) -> Int {
        var queued = 0
        func enqueue(_ batch: [(String, StorePath, Double)]) {
            let wanted = unexpected.map { f in batch.filter { f($0.1) && differsStill($0.1) } } ?? batch
            if (try? queue.enqueueAll(wanted)) != nil { queued += wanted.count }
        }
        /// Whether `path` still differs from its base, both read now.
        func differsStill(_ path: StorePath) -> Bool {
            let local: LocalItem?
            do { local = try localItem(path) } catch { return true }  // unreadable or a fifo: its sync says so
            guard let base = try? bases.base(root: key, path: path) else {
                // No base: a file (or link) is new here; a folder follows its files.
                return local.map { $0.kind != .folder } ?? false
            }
            guard let local else { return true }  // gone here
            return base.localToken != FolderRemote.version(local.st) && !(base.kind == .file && local.placeholder)
        }
        guard let cachefd = try? openCache() else { return 0 }
        defer { close(cachefd) }
        // The walk visits the paths in the order of their bytes, the bases' order, and meets
        // each base once: one cursor for the paths stored as text, one for the others.
        var texts = BasesInOrder(bases, root: key, utf8: true)
        var others = BasesInOrder(bases, root: key, utf8: false)
        var batch = [(String, StorePath, Double)]()
        let now = Date().timeIntervalSince1970
        func add(_ path: StorePath) {
            batch.append((key, path, now))
            if batch.count >= 1000 {
                enqueue(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        // Fills the daemon before this one left waiting (FillCommits.swift): found in this walk.
        let fillsLeft = fills.leftByAStop
        func compare(_ step: PathOrderWalk.Step) throws(DriveError) {
            // A name that is not an item (a fifo, gone): its base, if any, is passed and queued.
            guard let st = Beneath.stat(step.dir, step.name[...]), FolderRemote.kind(st) != nil else { return }
            let b = step.utf8 ? try texts.take(step.path, passed: { add($0.path) }) : try others.take(step.path, passed: { add($0.path) })
            if let b, b.localToken == FolderRemote.version(st) {
                // unchanged since this device and the remote agreed
                if fillsLeft, st.st_mode & S_IFMT == S_IFREG { commitLeftFill(step.dir, step.name[...]) }
            } else if let b, b.kind == .file, st.st_mode & S_IFMT == S_IFREG, Placeholder.isPlaceholder(step.dir, step.name[...]) {
                // A placeholder the base knows holds nothing of the user's, whatever its
                // time says (a fill a crash cut short changed it): nothing to compare.
            } else {
                add(step.path)
            }
        }
        do throws(DriveError) {
            try PathOrderWalk.walk(cachefd, .store, skip: { FolderRemote.isOwnName($0) }, stopped: stopped, visit: compare)
            // The bases the walk did not meet: gone here (not known after a stop cut it short).
            while !stopped(), let b = try texts.next() { add(b.path) }
            while !stopped(), let b = try others.next() { add(b.path) }
        } catch {
            logger.warning("store \(name): the local copy could not be compared with the records: \(error.message)")
        }
        enqueue(batch)
        if fillsLeft, !stopped() {
            let n = fills.waiting
            fills.commitNow()
            logger.info("store \(name): \(n) downloaded file\(n == 1 ? "" : "s") the last run left waiting for the disk written out")
        }
        return queued
    }

    /// The file `name` in `dir`, when it carries a "filled" mark of this boot, goes to the
    /// fills to commit.
    func commitLeftFill(_ dir: Int32, _ name: ArraySlice<UInt8>) {
        let fd = Beneath.withCName(name) { openat(dir, $0, O_RDONLY | dd_O_NOFOLLOW | dd_O_CLOEXEC | O_NONBLOCK) }
        guard fd >= 0 else { return }
        defer { close(fd) }
        var st = stat()
        guard let raw = Placeholder.rawMark(openFD: fd), case .filled = Placeholder.mark(raw: raw, boot: Placeholder.thisBoot),
              fstat(fd, &st) == 0 else { return }
        if !fills.add(fd: fd, st: st, mark: raw, times: nil) { _ = fills.settle(fd: fd, times: nil) }
    }

    /// Removes the downloads a crash interrupted (call before any worker of the store runs).
    func removeStaleDownloads() {
        guard var names = try? FileManager.default.contentsOfDirectory(atPath: downloads) else { return }
        // The placing folders' files too (placeholders being made), and the folders.
        var folders = [String]()
        for n in names where n.hasPrefix(Self.placingPrefix) {
            let sub = (try? FileManager.default.contentsOfDirectory(atPath: downloads + "/" + n)) ?? []
            names.append(contentsOf: sub.map { n + "/" + $0 })
            folders.append(n)
        }
        for n in names { unlink(downloads + "/" + n) }
        for f in folders { rmdir(downloads + "/" + f) }
        let files = names.count - folders.count
        if files > 0 { logger.info("store \(name): removed \(files) unfinished downloads left by a crash") }
    }

    /// The downloads folder's folder for the placing thread `k` (`makeTemporary(in:)`).
    static let placingPrefix = "placing-"
    static func placingFolder(_ k: Int) -> String { placingPrefix + String(k) }

    /// Conflict copies the user removed or renamed: their conflict is over.
    func clearResolvedConflicts() {
        guard let list = try? bases.conflicts(root: key) else { return }
        for (_, c) in list where (try? localItem(StorePath(c.copy))) ?? nil == nil {
            try? bases.removeConflict(root: key, copy: c.copy)
        }
    }
}

/// One item id at several paths of a remote (`StoreSync.healDuplicateIDs`).
public enum DuplicateIDs {
    /// How long one id must stay at the same paths before it is healed: longer than a move
    /// of this or another device takes between its copy and its delete (S3).
    public static let grace = 2.0

    /// The id an item at `path` takes when it must stop sharing `id`: the same on every device
    /// (a UUID made from a SHA-256 of both, version 8).
    public static func derived(_ id: String, at path: StorePath) -> String {
        var h = SHA256()
        h.update(data: Array("docdrive-item-id".utf8) + [0] + Array(id.utf8) + [0] + path.bytes)
        var b = Array(h.finalize().prefix(16))
        b[6] = (b[6] & 0x0F) | 0x80
        b[8] = (b[8] & 0x3F) | 0x80
        var out = ""
        for (i, byte) in b.enumerated() {
            if i == 4 || i == 6 || i == 8 || i == 10 { out += "-" }
            let hex = String(byte, radix: 16)
            out += hex.count == 1 ? "0" + hex : hex
        }
        return out
    }
}
