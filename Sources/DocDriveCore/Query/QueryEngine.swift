// QueryEngine: keeps the query index in step with the backing folders (a walk at start, inotify,
// a periodic reconcile) on its own thread, and feeds live queries (`docdrive query --watch`).
//
// Why inotify on the backing folders, for changes made through the mount too: every change the
// mount makes is a system call on a backing folder, so one watcher sees those and the ones made
// behind the mount's back alike, within a millisecond or two, and nothing runs on a FUSE request
// thread (the FUSE operations do not know the query index exists).
import CDocDriveSys
import Foundation
import Logging
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// A live query's change: "+" entered, "-" left, "~" changed while matching.
public struct QueryChange: Sendable {
    public var mark: String
    public var key: QueryKey
    public var hit: QueryHit?
}

public final class QueryEngine: Sendable {
    public let index: QueryIndex
    let home: DriveHome
    let logger: Logger
    let key: DriveKey?
    private let inotifyFD: Int32
    private let stopped = Atomic<Bool>(false)
    /// Lock order: `watches` and `live` are leaves, never held together, nor across a write.
    private let watches = Mutex(Watches())
    private let live = Mutex<[Int: LiveQuery]>([:])
    private let nextLive = Atomic<Int>(1)
    private let config: Mutex<DriveConfig>
    /// The config changed since the loop last looked (ConfigWatch): a walk is owed.
    private let configChanged = Atomic<Bool>(false)
    /// Counts finished passes of the loop (tests and `sync` wait on it).
    private let generation = Atomic<Int>(0)
    /// Set once the first walk is done.
    private let ready = Atomic<Bool>(false)
    /// Seconds between full reconcile walks (inotify can miss what overflows its queue).
    public static let reconcileInterval: Double = 300

    static let mask: UInt32 = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ATTRIB
                                     | IN_MODIFY | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)

    /// The inotify watches, by descriptor and by folder. `inside` holds, for each folder with
    /// watched folders below it, its children's names on the way to them (a trie of the watched
    /// paths): forgetting a removed folder's watches visits that folder's subtree, not every
    /// watch (filtering them all made `rm -rf` of many folders quadratic).
    struct Watches {
        private(set) var byWD: [Int32: QueryKey] = [:]
        private(set) var byPath: [QueryKey: Int32] = [:]
        private var inside: [QueryKey: Set<String>] = [:]
        var noSpaceLogged = false

        /// `k` is watched by `wd` (a folder moved keeps its descriptor: the old path goes).
        mutating func set(_ k: QueryKey, _ wd: Int32) {
            if let old = byWD[wd], old != k, byPath[old] == wd {
                byPath.removeValue(forKey: old)
                unlink(old)
            }
            byWD[wd] = k
            byPath[k] = wd
            link(k)
        }

        /// The kernel dropped the watch `wd` (its folder is gone).
        mutating func drop(_ wd: Int32) {
            guard let k = byWD.removeValue(forKey: wd), byPath[k] == wd else { return }
            byPath.removeValue(forKey: k)
            unlink(k)
        }

        /// Forgets the watches of `k` and of every folder below it; returns their descriptors.
        mutating func removeSubtree(_ k: QueryKey) -> [Int32] {
            var gone = [Int32]()
            var todo = [k]
            while let p = todo.popLast() {
                if let wd = byPath.removeValue(forKey: p) {
                    gone.append(wd)
                    if byWD[wd] == p { byWD.removeValue(forKey: wd) }
                }
                for name in inside.removeValue(forKey: p) ?? [] {
                    todo.append(QueryKey(root: p.root, path: p.path.isEmpty ? name : p.path + "/" + name))
                }
            }
            unlink(k)
            return gone
        }

        /// The folder `k` is in and its name there; nil for a root.
        static func split(_ k: QueryKey) -> (QueryKey, String)? {
            guard !k.path.isEmpty else { return nil }
            guard let slash = k.path.lastIndex(of: "/") else { return (QueryKey(root: k.root, path: ""), k.path) }
            return (QueryKey(root: k.root, path: String(k.path[..<slash])), String(k.path[k.path.index(after: slash)...]))
        }

        /// Puts `k` in the trie, and the folders above it that were not.
        private mutating func link(_ k: QueryKey) {
            var k = k
            while let (parent, name) = Self.split(k), inside[parent, default: []].insert(name).inserted {
                k = parent
            }
        }

        /// Takes `k` out of the trie once nothing is watched at or below it, and the folders above
        /// it that this leaves empty.
        private mutating func unlink(_ k: QueryKey) {
            var k = k
            while byPath[k] == nil, inside[k]?.isEmpty ?? true, let (parent, name) = Self.split(k) {
                inside.removeValue(forKey: k)
                guard inside[parent]?.remove(name) != nil else { return }
                if inside[parent]?.isEmpty == true { inside.removeValue(forKey: parent) }
                k = parent
            }
        }
    }

    final class LiveQuery: @unchecked Sendable {
        let node: QueryNode
        let scopes: [QueryScope]
        var members: Set<QueryKey>
        let sink: @Sendable ([QueryChange]) -> Void
        init(node: QueryNode, scopes: [QueryScope], members: Set<QueryKey>, sink: @escaping @Sendable ([QueryChange]) -> Void) {
            self.node = node
            self.scopes = scopes
            self.members = members
            self.sink = sink
        }
    }

    public init(home: DriveHome, config: DriveConfig, logger: Logger) throws(DriveError) {
        self.home = home
        self.logger = logger
        self.config = Mutex(config)
        self.key = try? DriveKey.load(from: home)
        index = try QueryIndex(path: home.runPath + "/query.sqlite", itemIndexPath: home.indexPath)
        inotifyFD = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        if inotifyFD < 0 { logger.warning("inotify is not available (\(Errno(rawValue: errno))): the query index follows changes by its periodic walk only") }
    }

    // MARK: roots

    struct Root { var key: String; var path: String }

    func roots(_ c: DriveConfig) -> [Root] {
        var r = [Root]()
        for app in c.apps {
            for f in ["Documents", "Data", "Inbox"] { r.append(Root(key: RootKey.app(id: app.id, folder: f).description, path: home.containerPath(app.id) + "/" + f)) }
        }
        for s in c.stores { r.append(Root(key: s.rootKey, path: home.cachePath(s.name))) }
        return r
    }

    public var currentConfig: DriveConfig { config.withLock { $0 } }

    /// Where an item shows in the mount, relative to its root: a store's and a public app's
    /// items under their display names, the rest under `.by-app/ID/Folder`.
    public func displayPath(_ k: QueryKey) -> String {
        let c = currentConfig
        let top = RootKey(k.root)?.shown(in: c) ?? k.root
        return k.path.isEmpty ? top : top + "/" + k.path
    }

    /// A mount-relative folder -> (root, path inside it), or nil.
    public func folderScope(_ mountRelative: String) -> QueryScope? {
        let c = currentConfig
        var parts = mountRelative.split(separator: "/").map(String.init)
        guard let first = parts.first else { return nil }
        parts.removeFirst()
        var root: String?
        if first == ".by-app" {
            guard parts.count >= 1, c.apps.contains(where: { $0.id == parts[0] }) else { return nil }
            let id = parts.removeFirst()
            guard let folder = parts.first else { return .app(id) }
            guard ["Documents", "Data", "Inbox"].contains(folder) else { return nil }
            parts.removeFirst()
            root = RootKey.app(id: id, folder: folder).description
        } else if let s = c.stores.first(where: { $0.displayName == first }) {
            root = s.rootKey
        } else if let a = c.apps.first(where: { $0.isPublic && $0.name == first }) {
            root = RootKey.app(id: a.id, folder: "Documents").description
        }
        guard let root else { return nil }
        return .folder(root: root, prefix: parts.joined(separator: "/"))
    }

    // MARK: the loop

    public func start() {
        Sys.startThread("docdrive-query", kernelName: "docdrive-query") { [self] in
            // The uploads' priority (nice 10, idle I/O). Nice 19 was tried: with it `tar x` through
            // the mount was not faster (4.4-6.2 s against 3.6-4.0 s without the index, 5 rounds).
            dd_background_thread()
            run()
        }
    }

    public func stop() { stopped.store(true, ordering: .relaxed) }

    /// `DOCDRIVE_QUERY_INDEX=off` in the daemon's environment leaves the query index out (for
    /// measuring what it costs); `docdrive query` then says it is off.
    public static var isDisabled: Bool { Tunables.process.queryIndexOff }

    public var isReady: Bool { ready.load(ordering: .acquiring) }

    private func run() {
        reconcile()
        ready.store(true, ordering: .releasing)
        var lastReconcile = Date().timeIntervalSince1970
        var buf = [UInt8](repeating: 0, count: 256 * 1024)
        // A walk owed (inotify's queue overflowed, or the config changed): done once the drive
        // has been quiet for a poll interval, so that it never competes with the burst that
        // caused it; the paths seen meanwhile are still applied at once.
        var walkOwed = false
        var lastPassSize = 0
        while !stopped.load(ordering: .relaxed) {
            var dirty = Dirty()
            var idle = true
            if inotifyFD >= 0 {
                var p = pollfd(fd: inotifyFD, events: Int16(POLLIN), revents: 0)
                if poll(&p, 1, 500) > 0 {
                    idle = false
                    // Coalesce a burst by sleeping, not polling: a poll wakes this thread for every
                    // event, and during `tar x` those wake-ups cost more than the index itself
                    // (perf: a quarter of the thread's time in the scheduler). Sleep 5 ms, drain the
                    // queue, again while events keep coming, at most 20 ms.
                    // In a burst (the last pass had many paths), gather up to 80 ms: each
                    // transaction rewrites the pages it touched, and fewer, larger ones cost
                    // `tar x` less disk traffic; a lone change still shows in about 5 ms.
                    let window = lastPassSize >= 64 ? 0.08 : 0.02
                    let start = Date().timeIntervalSince1970
                    while true {
                        usleep(5_000)
                        readEvents(&buf, into: &dirty)
                        p.revents = 0
                        if Date().timeIntervalSince1970 - start >= window || poll(&p, 1, 0) <= 0 { break }
                    }
                }
            } else {
                usleep(500_000)
            }
            let now = Date().timeIntervalSince1970
            if configChanged.exchange(false, ordering: .acquiring) { walkOwed = true }
            if dirty.overflow {
                logger.info("query index: inotify's queue overflowed; walking the folders again once the drive is quiet")
                walkOwed = true
            }
            lastPassSize = dirty.order.count
            if !dirty.order.isEmpty { process(dirty) }
            if (walkOwed && idle) || now - lastReconcile > Self.reconcileInterval {
                reconcile()
                walkOwed = false
                lastReconcile = Date().timeIntervalSince1970
            }
            generation.add(1, ordering: .releasing)
        }
        if inotifyFD >= 0 { close(inotifyFD) }
    }

    /// The folder of the last path a pass looked at, open (O_PATH), so that the next path in
    /// it costs a one-name `fstatat` rather than a walk of the whole path from `/` (perf of
    /// this thread during 20,000 creates: `lstat` of full paths was 17 % of its time). Only in
    /// a pass where no folder was moved or deleted (`Dirty.gone` empty): a folder renamed before
    /// the pass's events were read would otherwise be looked in under its old path. A rename
    /// after them is in the next pass, as it was with full paths. Any failure to open the
    /// folder falls back to the full path.
    struct LastFolder: ~Copyable {
        let usable: Bool
        private var root = ""
        private var rel = Substring()
        private var fd: Int32 = -1

        init(usable: Bool) { self.usable = usable }

        mutating func lstat(root: String, base: String, rel path: String, full: String, _ st: inout stat) -> Int32 {
            guard usable, let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return Glibc.lstat(full, &st) }
            let dir = path[..<slash]
            if fd < 0 || root != self.root || dir != rel {
                close()
                fd = open(base + "/" + dir, Sys.O_PATH | O_DIRECTORY | O_CLOEXEC)
                guard fd >= 0 else { return Glibc.lstat(full, &st) }
                self.root = root
                rel = dir
            }
            let name = String(path[path.utf8.index(after: slash)...])
            return fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW)
        }

        mutating func close() {
            if fd >= 0 { Glibc.close(fd) }
            fd = -1
        }

        deinit { if fd >= 0 { Glibc.close(fd) } }
    }

    /// Paths that changed since the last pass, in order, each once.
    struct Dirty {
        var order = [QueryKey]()
        var seen = Set<QueryKey>()
        /// Paths whose xattrs may have changed (IN_ATTRIB, or moved in): their tags are read again.
        var attrs = Set<QueryKey>()
        /// Folders created or moved in: walked (a folder's IN_ATTRIB, as tar sends at its end,
        /// must not walk its subtree again).
        var fresh = Set<QueryKey>()
        /// Folders moved away or deleted: their subtrees go.
        var gone = Set<QueryKey>()
        /// Files whose last event was their deletion or move away: gone without a look. (An
        /// lstat per path was a fifth of this thread's time in a perf profile of create, unlink
        /// and tar x through the mount; for unlinks, skipping it changed no measured figure.)
        var removed = Set<QueryKey>()
        var overflow = false
        mutating func add(_ k: QueryKey) {
            if seen.insert(k).inserted { order.append(k) }
        }
    }

    private func readEvents(_ buf: inout [UInt8], into dirty: inout Dirty) {
        while true {
            let n = buf.withUnsafeMutableBytes { read(inotifyFD, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            var o = 0
            buf.withUnsafeBytes { raw in
                while o + 16 <= n {
                    let wd = raw.loadUnaligned(fromByteOffset: o, as: Int32.self)
                    let mask = raw.loadUnaligned(fromByteOffset: o + 4, as: UInt32.self)
                    let len = Int(raw.loadUnaligned(fromByteOffset: o + 12, as: UInt32.self))
                    var name = ""
                    if len > 0 {
                        let bytes = raw[(o + 16)..<(o + 16 + len)]
                        name = String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
                    }
                    o += 16 + len
                    if mask & UInt32(IN_Q_OVERFLOW) != 0 { dirty.overflow = true; continue }
                    if mask & UInt32(IN_IGNORED) != 0 {
                        watches.withLock { $0.drop(wd) }
                        continue
                    }
                    guard !name.isEmpty, let dir = watches.withLock({ $0.byWD[wd] }) else { continue }
                    let k = QueryKey(root: dir.root, path: dir.path.isEmpty ? name : dir.path + "/" + name)
                    if mask & UInt32(IN_ISDIR) != 0 && mask & UInt32(IN_MOVED_FROM | IN_DELETE) != 0 { dirty.gone.insert(k) }
                    if mask & UInt32(IN_ISDIR) == 0 && mask & UInt32(IN_MOVED_FROM | IN_DELETE) != 0 {
                        dirty.removed.insert(k)
                    } else if !dirty.removed.isEmpty {
                        dirty.removed.remove(k)
                    }
                    dirty.add(k)
                    if mask & UInt32(IN_ATTRIB | IN_MOVED_TO) != 0 { dirty.attrs.insert(k) }
                    if mask & UInt32(IN_ISDIR) != 0 && mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0 { dirty.fresh.insert(k) }
                }
            }
        }
    }

    /// Applies a pass's changes: each path is looked at again on disk.
    private func process(_ dirty: Dirty) {
        let rootPaths = Dictionary(roots(currentConfig).map { ($0.key, $0.path) }, uniquingKeysWith: { a, _ in a })
        var upserts = [QueryRow](), deletes = [QueryKey](), subtrees = [QueryKey]()
        // A pass in which no folder went away looks each path up from its folder, opened once
        // for the paths of the pass in it (see LastFolder; its descriptor closes with it).
        var folder = LastFolder(usable: dirty.gone.isEmpty)
        for k in dirty.order {
            guard let base = rootPaths[k.root] else { continue }
            let full = base + "/" + k.path
            var st = stat()
            let shown = QueryKey(root: k.root, path: Self.shownPath(k.path))
            if dirty.removed.contains(k) {
                deletes.append(shown)
                continue
            }
            if folder.lstat(root: k.root, base: base, rel: k.path, full: full, &st) != 0 {
                deletes.append(shown)
                // Only a folder has a subtree and watches (a file's delete must not scan them).
                if dirty.gone.contains(k) || watches.withLock({ $0.byPath[k] != nil }) {
                    subtrees.append(k)
                    forgetWatches(under: k)
                }
                continue
            }
            if dirty.gone.contains(k) {
                // Moved away and back, or replaced: drop what was under it and walk again.
                subtrees.append(k)
                forgetWatches(under: k)
            }
            let isDir = st.st_mode & S_IFMT == S_IFDIR
            // A file just created has no tags; setting them later is an IN_ATTRIB.
            if let row = makeRow(root: k.root, rootPath: base, rel: k.path, st: st, readTags: dirty.attrs.contains(k)) {
                upserts.append(row)
            }
            if isDir && (dirty.fresh.contains(k) || dirty.gone.contains(k) || watches.withLock({ $0.byPath[k] == nil })) {
                addWatch(k.root, base, k.path)
                let dfd = Sys.openQuietly(full, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                if dfd >= 0 { walk(root: k.root, rootPath: base, rel: k.path, fd: dfd, into: &upserts) }
            }
        }
        commit(upserts: upserts, deletes: deletes, subtrees: subtrees)
    }

    private func commit(upserts: [QueryRow], deletes: [QueryKey], subtrees: [QueryKey]) {
        do {
            let changed = try index.apply(upserts: upserts, deletes: deletes, subtreeDeletes: subtrees)
            if !changed.isEmpty { notify(changed) }
        } catch {
            logger.error("the query index cannot be written: \(error)")
        }
    }

    /// Walks every root, adds what is missing, updates what changed, drops what is gone.
    ///
    /// In chunks of `QueryIndex.walkChunk` rows, each upserted at once (a row that did not change
    /// is not written): holding every row of a 100,000-item root and a dictionary of what the
    /// database had cost tens of MB at the peak, which the daemon's RSS kept afterwards. What is
    /// gone is found by the hashes of the paths seen (a collision of 64-bit hashes would keep
    /// one deleted row until the next walk).
    func reconcile() {
        let c = currentConfig
        let t0 = Date().timeIntervalSince1970
        var total = 0
        let known = Set(roots(c).map(\.key))
        for r in roots(c) {
            var seen = Set<Int>()
            var rows = [QueryRow]()
            rows.reserveCapacity(QueryIndex.walkChunk)
            let flush = { (rows: inout [QueryRow]) in
                for row in rows { seen.insert(row.path.hashValue) }
                total += rows.count
                self.commit(upserts: rows, deletes: [], subtrees: [])
                rows.removeAll(keepingCapacity: true)
            }
            addWatch(r.key, r.path, "")
            let fd = Sys.openQuietly(r.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if fd >= 0 { walk(root: r.key, rootPath: r.path, rel: "", fd: fd, into: &rows, flush: flush) }
            flush(&rows)
            let gone = ((try? index.paths(root: r.key) { seen.contains($0.hashValue) }) ?? []).map { QueryKey(root: r.key, path: $0) }
            if !gone.isEmpty { commit(upserts: [], deletes: gone, subtrees: []) }
        }
        for r in (try? index.roots()) ?? [] where !known.contains(r) {
            commit(upserts: [], deletes: [], subtrees: [QueryKey(root: r, path: "")])
        }
        // The names a name query scans, from the rows as the walk left them (the copies of rows
        // the walk wrote are dropped); without them, queries scan in SQL.
        do {
            try index.rebuildNames()
        } catch {
            index.names.clear()
            logger.error("query index: the names cannot be read into memory: \(error)")
        }
        // The walk's pages and arrays are not needed until the next one: give the memory back.
        index.releaseMemory()
        trimMalloc()
        logger.info("query index: \(total) items walked in \(String(format: "%.2f", Date().timeIntervalSince1970 - t0)) s")
    }

    // MARK: walking

    static func shownPath(_ rel: String) -> String {
        ReservedNames.isReserved(rel) ? String(rel.dropLast(ReservedNames.referenceSuffix.count)) : rel
    }

    /// Adds a row for every entry below the folder `fd` (closed here), watching every folder;
    /// `flush` (if any) takes the rows whenever a chunk is full.
    private func walk(root: String, rootPath: String, rel: String, fd: Int32, into rows: inout [QueryRow],
                      flush: ((inout [QueryRow]) -> Void)? = nil) {
        guard let dir = fdopendir(fd) else {
            close(fd)
            return
        }
        defer { closedir(dir) }
        let dfd = dirfd(dir)
        while let ent = readdir(dir) {
            let name = withUnsafePointer(to: &ent.pointee.d_name) {
                String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            if name == "." || name == ".." { continue }
            var st = stat()
            guard fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            let child = rel.isEmpty ? name : rel + "/" + name
            if let row = makeRow(root: root, rootPath: rootPath, rel: child, st: st, dirfd: dfd, name: name) { rows.append(row) }
            if let flush, rows.count >= QueryIndex.walkChunk { flush(&rows) }
            if st.st_mode & S_IFMT == S_IFDIR {
                addWatch(root, rootPath, child)
                let sub = Sys.openQuietly(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                if sub >= 0 { walk(root: root, rootPath: rootPath, rel: child, fd: sub, into: &rows, flush: flush) }
            }
        }
    }

    /// The row for one entry (nil for an unreadable reference file).
    func makeRow(root: String, rootPath: String, rel: String, st: stat, dirfd: Int32 = -1, name: String? = nil,
                 readTags: Bool = true) -> QueryRow? {
        let name = name ?? String(rel.split(separator: "/").last ?? Substring(rel))
        let full = rootPath + "/" + rel
        let type = st.st_mode & S_IFMT
        var row = QueryRow(root: root, path: rel, name: name, kind: "other", size: Int64(st.st_size),
                           mtime: Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9,
                           tags: "", ref: false, targetRoot: nil, targetPath: nil)
        if type == S_IFDIR {
            row.kind = QueryKind.folder.rawValue
            row.size = 0
        } else if type == S_IFREG && ReservedNames.isReserved(name) {
            // A reference entry: shown under its name without the ending, with its target's size and times.
            row.name = String(name.dropLast(ReservedNames.referenceSuffix.count))
            row.path = Self.shownPath(rel)
            row.ref = true
            let parent = open((full as NSString).deletingLastPathComponent, Sys.O_PATH | O_DIRECTORY | O_CLOEXEC)
            defer { if parent >= 0 { close(parent) } }
            if parent >= 0, let p = ReferenceLink.read(parent, name, key: key) {
                row.targetRoot = RootKey.store(p.store).description
                row.targetPath = p.hint
                var t = stat()
                if lstat(home.cachePath(p.store) + "/" + p.hint, &t) == 0 {
                    row.size = Int64(t.st_size)
                    row.mtime = Double(t.st_mtim.tv_sec) + Double(t.st_mtim.tv_nsec) / 1e9
                }
            }
            row.kind = (QueryKinds.fromName(row.name) ?? .document).rawValue
        } else if type == S_IFREG {
            if let k = QueryKinds.fromName(name) {
                row.kind = k.rawValue
            } else if st.st_size > 0 {
                let f = Sys.openQuietly(full, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
                if f >= 0 {
                    row.kind = QueryKinds.fromContent(f)?.rawValue ?? "other"
                    close(f)
                }
            }
        } else if let k = QueryKinds.fromName(name) {
            row.kind = k.rawValue
        }
        if type == S_IFREG || type == S_IFDIR { row.tags = readTags ? Self.tags(full) : nil }
        return row
    }

    /// The freedesktop tags (`user.xdg.tags`, comma-separated), folded, as ",a,b," ("" if none).
    static func tags(_ path: String) -> String {
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = buf.withUnsafeMutableBytes { c_lgetxattr(path, "user.xdg.tags", $0.baseAddress, $0.count) }
        guard n > 0 else { return "" }
        let tags = String(decoding: buf[0..<n], as: UTF8.self).split(separator: ",")
            .map { QueryParser.fold($0.trimmingCharacters(in: .whitespaces)) }.filter { !$0.isEmpty }
        return tags.isEmpty ? "" : "," + tags.joined(separator: ",") + ","
    }

    private func addWatch(_ root: String, _ rootPath: String, _ rel: String) {
        guard inotifyFD >= 0 else { return }
        let full = rel.isEmpty ? rootPath : rootPath + "/" + rel
        let wd = inotify_add_watch(inotifyFD, full, Self.mask)
        if wd < 0 {
            let e = errno
            let log = watches.withLock { w -> Bool in
                defer { w.noSpaceLogged = true }
                return !w.noSpaceLogged
            }
            if log { logger.warning("inotify cannot watch \(full) (\(Errno(rawValue: e))); raise fs.inotify.max_user_watches: changes made there behind the mount's back show at the next reconcile") }
            return
        }
        watches.withLock { $0.set(QueryKey(root: root, path: rel), wd) }
    }

    /// Stops watching a folder that went away and everything under it.
    private func forgetWatches(under k: QueryKey) {
        let wds = watches.withLock { $0.removeSubtree(k) }
        for wd in wds { inotify_rm_watch(inotifyFD, wd) }
    }

    // MARK: live queries

    /// Registers a live query; `sink` gets its changes (on the engine's thread; keep it short).
    /// Returns its id (for `unwatch`) and the current results.
    public func watch(_ node: QueryNode, scopes: [QueryScope], sort: QuerySort?, descending: Bool, limit: Int?,
                      sink: @escaping @Sendable ([QueryChange]) -> Void) throws(DriveError) -> (Int, [QueryHit]) {
        let id = nextLive.wrappingAdd(1, ordering: .relaxed).oldValue
        // Registered before the first search, so that no change between the two is lost.
        let q = LiveQuery(node: node, scopes: scopes, members: [], sink: sink)
        live.withLock { $0[id] = q }
        let hits = try index.search(node, scopes: scopes, sort: sort, descending: descending, limit: limit)
        live.withLock { _ in q.members = Set(hits.map(\.key)) }
        return (id, hits)
    }

    public func unwatch(_ id: Int) { _ = live.withLock { $0.removeValue(forKey: id) } }

    private func notify(_ changed: [QueryKey]) {
        let queries = live.withLock { Array($0.values) }
        guard !queries.isEmpty else { return }
        for q in queries {
            var now = [QueryKey: QueryHit]()
            var i = 0
            while i < changed.count {
                let chunk = Array(changed[i..<min(i + 400, changed.count)])
                for h in (try? index.search(q.node, scopes: q.scopes, within: chunk)) ?? [] { now[h.key] = h }
                i += 400
            }
            var out = [QueryChange]()
            live.withLock { _ in
                for k in changed {
                    let was = q.members.contains(k)
                    if let h = now[k] {
                        out.append(QueryChange(mark: was ? "~" : "+", key: k, hit: h))
                        q.members.insert(k)
                    } else if was {
                        out.append(QueryChange(mark: "-", key: k, hit: nil))
                        q.members.remove(k)
                    }
                }
            }
            if !out.isEmpty { q.sink(out) }
        }
    }

    /// Waits for the first walk (at most `timeout` seconds).
    public func waitUntilReady(timeout: Double) {
        let deadline = Date().timeIntervalSince1970 + timeout
        while !isReady && Date().timeIntervalSince1970 < deadline { usleep(5_000) }
    }

    /// Waits until the engine has finished a pass that started after this call (tests, `--sync`).
    public func settle(timeout: Double = 5) {
        let deadline = Date().timeIntervalSince1970 + timeout
        while !isReady && Date().timeIntervalSince1970 < deadline { usleep(5_000) }
        let g = generation.load(ordering: .acquiring)
        while generation.load(ordering: .acquiring) < g + 2 && Date().timeIntervalSince1970 < deadline { usleep(2_000) }
    }
}

/// lgetxattr(2): one system call (Glibc's module map leaves sys/xattr.h out; CDocDriveSys has only
/// the descriptor-based wrapper, which costs an open and a close more per file).

/// Gives the heap's free memory back to the system (every thread's arena).
func trimMalloc() { _ = c_malloc_trim(0) }

/// malloc_trim(3) (malloc.h is not in Glibc's module).
@_silgen_name("malloc_trim")
private func c_malloc_trim(_ pad: Int) -> Int32

/// The daemon's heap in at most `arenas` malloc arenas (glibc makes up to 8 per core, one per
/// thread that finds the others busy). The sync's short-lived threads (a poll's 16 HEAD threads,
/// downloads) left what they allocated for long (the HEAD answers a store keeps) scattered over
/// all of them, between pages no trim can give back: joining a store of 100,000 items peaked
/// about 45 MB higher with the default (README, joining). Call before the daemon's threads start.
public func limitMallocArenas(_ arenas: Int32) { _ = c_mallopt(-8 /* M_ARENA_MAX */, arenas) }

@_silgen_name("mallopt")
private func c_mallopt(_ param: Int32, _ value: Int32) -> Int32

@_silgen_name("lgetxattr")
private func c_lgetxattr(_ path: UnsafePointer<CChar>, _ name: UnsafePointer<CChar>, _ value: UnsafeMutableRawPointer?, _ size: Int) -> Int

extension QueryEngine: DriveChangeSubscriber {
    public var follows: DriveChangeKinds { .config }

    public func changed(_ change: DriveChange) {
        if case let .config(config, _) = change { configChanged(config) }
    }

    /// Apps or stores added or removed (ConfigWatch): their folders are walked once the drive is
    /// quiet.
    func configChanged(_ config: DriveConfig) {
        self.config.withLock { $0 = config }
        configChanged.store(true, ordering: .releasing)
    }
}
