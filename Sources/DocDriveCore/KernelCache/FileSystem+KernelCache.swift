// FileSystem+KernelCache: the kernel keeps entries and attributes of watched backing folders long,
// and is told at once of every change made in them behind its back.
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// What the adapter does to drop what the kernel caches (FUSE's notify_inval_inode and
/// notify_inval_entry). Both may wait for the kernel's lock of a folder: never call them from a
/// request thread, nor from a thread a request may wait for (the watch's thread, the control
/// socket's, `kernelNotices`; see Coordination/LockOrder.md).
public struct KernelInvalidation: Sendable {
    /// Drops a node's cached attributes.
    public let attributes: @Sendable (UInt64) -> Void
    /// Drops the cached entry of a NUL-terminated name in a folder (by node id).
    public let entry: @Sendable (UInt64, UnsafePointer<CChar>) -> Void

    public init(attributes: @escaping @Sendable (UInt64) -> Void, entry: @escaping @Sendable (UInt64, UnsafePointer<CChar>) -> Void) {
        self.attributes = attributes
        self.entry = entry
    }
}

/// How long the kernel keeps what it was told, and why that stays true.
///
/// A node of the unified view whose backing folder is watched (KernelCacheWatch) is *kept
/// long*: its entry and attributes are valid for `FileSystemOptions.keptTimeout` instead of a
/// second. Everything that changes such a folder behind the kernel's back shows in the watch,
/// and the watch's thread drops the kernel's copy within milliseconds:
/// * a name removed or moved away or in (IN_DELETE, IN_MOVED_FROM/TO): its entry, and the
///   entry of the name a reference shows under;
/// * a file's attributes or content (IN_ATTRIB, IN_MODIFY, a name moved in): its attributes,
///   when they differ from what the kernel was last told (`Inode.told`), so that the drive's
///   own changes through the mount, which the kernel already knows, cost a stat and no more;
/// * any change of its entries: the folder's own attributes (mtime, size, link count).
/// A failed lookup is never cached (no negative entries), so a name created behind the back
/// needs nothing. What is not kept long, and why:
/// * the drive's own levels (the root, `.by-app`, an app's view), which list the
///   configuration, and the top level of each store and app folder (its entry is in the root);
/// * the per-app views (`.by-app/ID/...`), whose entries depend on grants;
/// * reference entries, whose attributes are another file's;
/// * files with more than one link: a change made through a link in another folder is reported
///   only in that folder;
/// * a folder whose watch could not be added (the user's inotify watches used up: the log says
///   so once), and its entries;
/// * while a shared writable mapping may change a file: no validity (FileSystem+MappedTimes).
/// When inotify's queue overflows, every kept node's attributes and every watched folder's
/// entries are dropped. A file moved behind the back from a watched folder into one the kernel
/// does not hold keeps its cached attributes until they expire (`keptTimeout`) for a process
/// that still holds it open.
extension DriveFileSystem {
    /// Starts the watch (the adapter calls it once the session exists). False without inotify:
    /// every node then has the short timeouts.
    @discardableResult
    public func startKernelCache(_ inv: KernelInvalidation) -> Bool {
        setKernelInvalidation(inv)
        return table.kernelWatch.start { [weak self] events, overflowed in
            self?.kernelCacheChanged(events, overflowed: overflowed, inv)
        }
    }

    /// Stops the watch (at unmount).
    /// Sets how the kernel is told (also for the control socket's commands and the sync's
    /// changes, with or without the watch).
    public func setKernelInvalidation(_ inv: KernelInvalidation) {
        invalidation.withLock { $0 = inv }
    }

    /// How the kernel is told, nil before the session exists.
    public var kernelInvalidation: KernelInvalidation? {
        invalidation.withLock { $0 }
    }

    public func stopKernelCache() {
        table.kernelWatch.stop()
    }

    /// Decides, after a lookup in `parent` (nil: a top level) found `inode`, whether the kernel
    /// may keep it long; a folder is watched first.
    func keepInKernel(_ inode: Inode, parent: Inode?, _ st: stat) {
        guard table.kernelWatch.isRunning, inode.kind == .backing, inode.view == .unified, inode.reference == nil else { return }
        if let parent, parent.watch.load(ordering: .relaxed) < 0 {
            inode.keptLong.store(false, ordering: .relaxed)
            return
        }
        if inode.isDirectory {
            if inode.watch.load(ordering: .relaxed) < 0 { watchFolder(inode) }
            inode.keptLong.store(inode.watch.load(ordering: .relaxed) >= 0, ordering: .relaxed)
        } else {
            inode.keptLong.store(st.st_nlink <= 1, ordering: .relaxed)
        }
    }

    private func watchFolder(_ n: Inode) {
        guard let fd = try? n.acquire() else { return }
        defer { n.release() }
        let logger = self.logger
        guard let wd = table.kernelWatch.add(folderFD: fd, .init(dev: n.dev, ino: n.ino), noSpace: { e in
            logger.warning("inotify cannot watch more backing folders (\(Errno(rawValue: e))); raise fs.inotify.max_user_watches. Folders beyond it are cached by the kernel for a second only")
        }) else { return }
        // Another lookup of the same node may have watched it meanwhile: one watch per node.
        if !n.watch.compareExchange(expected: -1, desired: wd, ordering: .relaxed).exchanged {
            table.kernelWatch.remove(wd)
        }
    }

    /// Expects the watch's event of a removal or rename of `name` in `p` about to be made
    /// through the mount (see OwnEntryChanges); nil when none is expected: a folder of another
    /// view (the unified view's node of the same folder still needs the invalidation), one not
    /// watched, or a reference file's name (its shown name is invalidated with it).
    func expectOwnChange(_ p: Inode, _ name: UnsafePointer<CChar>) -> UInt64? {
        guard p.view == .unified, p.watch.load(ordering: .relaxed) >= 0,
              !ReservedNames.isReference(name, length: strlen(name)) else { return nil }
        let key = OwnEntryChanges.key(dev: p.dev, ino: p.ino, name: name)
        ownChanges.expect(key)
        return key
    }

    /// The change was not made: the expectation goes, or, if the watch took it already for
    /// another program's change of the same name, the kernel is told of that change now.
    func withdrawOwnChange(_ key: UInt64?, _ p: Inode, _ pfd: Int32, _ name: UnsafePointer<CChar>) {
        guard let key, !ownChanges.withdraw(key) else { return }
        invalidateLater(folder: pfd, name: String(cString: name))
    }

    /// How long the kernel may keep a node's entry.
    @inline(__always)
    public func entryTimeout(_ n: Inode) -> Double {
        n.keptLong.load(ordering: .relaxed) && !n.isTopLevel ? options.keptTimeout : options.entryTimeout
    }

    /// The attributes the kernel is shown of a backing file's `st`: a filled placeholder keeps
    /// its placeholder's ctime (Sync/FilledTimes.swift).
    @inline(__always)
    func shown(_ st: stat) -> stat {
        var st = st
        sync.onDemand.filledTimes.apply(&st)
        return st
    }

    /// Notes the attributes the kernel is about to be told: `st` as shown (`shown`). The digest
    /// is of what the kernel sees, so that a change only of the backing file's own ctime that
    /// it does not show (a filled placeholder's mark set or removed) invalidates nothing.
    @inline(__always)
    func noteTold(_ n: Inode, _ st: stat) {
        if n.keptLong.load(ordering: .relaxed) { n.told.store(Self.digest(st), ordering: .relaxed) }
    }

    /// A change through the mount that the adapter tells the kernel of itself (an access ACL):
    /// the attributes it now has are noted as told, so that the watch does not invalidate them
    /// again while the kernel fetches them. (An invalidation that crosses a GETATTR makes the
    /// kernel discard that reply; a permission check right after then saw the old mode.)
    public func noteToldNow(_ id: UInt64) {
        guard let n = table.get(id), n.keptLong.load(ordering: .relaxed), let st = try? getattr(node: n) else { return }
        n.told.store(Self.digest(shown(st)), ordering: .relaxed)
    }

    /// What the kernel shows of a file, in 64 bits (the access time aside: reads change it,
    /// and it is not kept true, as on any FUSE filesystem with attribute caching).
    static func digest(_ st: stat) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        @inline(__always) func mix(_ v: UInt64) { h = (h ^ v) &* 0x100_0000_01b3; h ^= h >> 29 }
        mix(UInt64(st.st_mode)); mix(UInt64(st.st_nlink)); mix(UInt64(st.st_uid)); mix(UInt64(st.st_gid))
        mix(UInt64(bitPattern: Int64(st.st_size))); mix(UInt64(bitPattern: Int64(st.st_blocks))); mix(UInt64(st.st_rdev))
        mix(UInt64(bitPattern: Int64(st.st_mtim.tv_sec))); mix(UInt64(bitPattern: Int64(st.st_mtim.tv_nsec)))
        mix(UInt64(bitPattern: Int64(st.st_ctim.tv_sec))); mix(UInt64(bitPattern: Int64(st.st_ctim.tv_nsec)))
        return h
    }

    /// A batch of the watch's events (on its thread).
    func kernelCacheChanged(_ events: [KernelCacheWatch.Event], overflowed: Bool, _ inv: KernelInvalidation) {
        let now = Sys.monotonicNanoseconds()
        if overflowed {
            logger.info("kernel cache: inotify's queue overflowed; every cached entry and attribute of the watched folders is dropped")
            ownChanges.prune(now: now, all: true)
            dropEverything(inv)
        } else {
            ownChanges.prune(now: now)
        }
        struct Name: Hashable { let folder: UInt64; let name: [CChar] }
        var folders = [UInt64: Inode]()
        var entries = [Name]()
        var seenEntries = Set<Name>()
        var attributes = [(Inode, [CChar])]()
        var seenAttributes = Set<Name>()
        let entryMask = UInt32(IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO)
        let attributeMask = UInt32(IN_ATTRIB | IN_MODIFY | IN_MOVED_TO)
        for e in events {
            guard let dir = table.unifiedNode(dev: e.folder.dev, ino: e.folder.ino) else { continue }
            // The drive's own removal or rename: the kernel knows of it (its moved file's
            // attributes are still compared below).
            let own = !e.name.isEmpty && e.mask & entryMask != 0
                && ownChanges.take(e.name.withUnsafeBufferPointer { OwnEntryChanges.key(dev: e.folder.dev, ino: e.folder.ino, name: $0) }, now: now)
            if own {
                if e.mask & attributeMask != 0, seenAttributes.insert(Name(folder: dir.nodeID, name: e.name)).inserted {
                    attributes.append((dir, e.name))
                }
                continue
            }
            if e.name.isEmpty || e.mask & UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) != 0 {
                folders[dir.nodeID] = dir
            }
            if e.name.isEmpty { continue }
            let key = Name(folder: dir.nodeID, name: e.name)
            if e.mask & entryMask != 0 {
                if seenEntries.insert(key).inserted { entries.append(key) }
                if let shown = Self.shownName(e.name), seenEntries.insert(Name(folder: dir.nodeID, name: shown)).inserted {
                    entries.append(Name(folder: dir.nodeID, name: shown))
                }
            }
            if e.mask & attributeMask != 0, seenAttributes.insert(key).inserted { attributes.append((dir, e.name)) }
        }
        for (dir, name) in attributes {
            guard let pfd = try? dir.acquire() else { continue }
            var st = stat()
            let r = (name + [0]).withUnsafeBufferPointer { fstatat(pfd, $0.baseAddress!, &st, AT_SYMLINK_NOFOLLOW) }
            dir.release()
            guard r == 0, let n = table.unifiedNode(dev: UInt64(st.st_dev), ino: UInt64(st.st_ino)),
                  n.keptLong.load(ordering: .relaxed) else { continue }
            let seen = Self.digest(shown(st))
            guard n.told.load(ordering: .relaxed) != seen else { continue }
            // Dropped now: the kernel's next look gets these attributes or later ones (a reply
            // read before this drop and crossing it is discarded by the kernel), so further
            // events that leave them as seen here need nothing more. A download's write, times
            // and mark came as up to four events, often in two batches: each dropped the
            // attributes again until the kernel had looked (2.6 drops per file read on demand).
            n.told.store(seen, ordering: .relaxed)
            inv.attributes(n.nodeID)
        }
        for dir in folders.values { inv.attributes(dir.nodeID) }
        for e in entries { (e.name + [0]).withUnsafeBufferPointer { inv.entry(e.folder, $0.baseAddress!) } }
    }

    /// The name a reference file's entry shows under, nil for any other name.
    static func shownName(_ name: [CChar]) -> [CChar]? {
        let suffix = Array(ReservedNames.referenceSuffix.utf8).map { CChar(bitPattern: $0) }
        guard name.count > suffix.count, Array(name.suffix(suffix.count)) == suffix else { return nil }
        return Array(name.dropLast(suffix.count))
    }

    /// Events were lost: every kept node's attributes and every watched folder's entries go.
    private func dropEverything(_ inv: KernelInvalidation) {
        for n in table.liveNodes where n.keptLong.load(ordering: .relaxed) {
            inv.attributes(n.nodeID)
            guard n.isDirectory, n.watch.load(ordering: .relaxed) >= 0, let fd = try? n.acquire() else { continue }
            let names = Beneath.names(fd) ?? []
            n.release()
            for e in names {
                let name = e.name.map { CChar(bitPattern: $0) }
                for shown in [name, Self.shownName(name)].compactMap({ $0 }) {
                    (shown + [0]).withUnsafeBufferPointer { inv.entry(n.nodeID, $0.baseAddress!) }
                }
            }
        }
    }
}
