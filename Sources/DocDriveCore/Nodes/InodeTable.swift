// InodeTable: the nodes the kernel may name, by node id and by backing identity, in 64 parts.
import CDocDriveSys
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// All nodes the kernel may name, by node id and by backing identity.
///
/// Locks: the table is in 64 parts (`shards`), each under one lock of its own, which holds
/// the nodes of the backing files that fall in it (by the file's dev and inode number): by
/// backing identity (`byKey`), by id with their lookup counts (`byID`), the forgotten ones
/// remembered, and the part's next id. A node id carries its part in its low bits, so a
/// request that finds its node by id (every request) and a LOOKUP or CREATE that finds or
/// makes it by backing file take the same one lock, and no lock is global. (With one lock
/// for everything, 76 % of the daemon's contended lock waits with 8 parallel writers were on
/// it; with the map by identity under one lock and the ids in parts, that lock still had the
/// most: 150 of 6,057 samples in `insertOrFind`.) A part's lock is a leaf, one part at a time,
/// never held for a system call (a forgotten node's place is read outside it).
final class InodeTable: Sendable {
    struct Key: Hashable {
        var view: View
        var dev: UInt64
        var ino: UInt64
        /// A reference file's node is not the same node as that file seen plainly.
        var isReference = false
    }

    /// The live nodes by backing identity: a table of the nodes themselves, each found by the
    /// key it holds (8 bytes a bucket). It was a Dictionary of a key and an id, 24 bytes a
    /// bucket once the key was packed in 16 (40 before); with 100,000 nodes, 6.3 MB where this
    /// takes 2.1 (see ProbedTable).
    struct IdentityMap {
        private struct Keyed: ProbedElement {
            let node: Inode
            var probeHash: UInt64 { NodeSpread.hash(dev: node.dev, ino: node.ino) }
        }
        private var nodes = ProbedTable<Keyed>()
        /// Every view a node was ever made in (they only grow; an app's view is made at its
        /// first lookup): a backing folder's nodes are found by key in each.
        private(set) var views: [View] = [.unified]

        static func key(of n: Inode) -> Key {
            Key(view: n.view, dev: n.dev, ino: n.ino, isReference: n.reference != nil)
        }

        private func bucket(_ k: Key) -> Int? {
            nodes.find(hash: NodeSpread.hash(dev: k.dev, ino: k.ino)) { e in
                let n = e.node
                return n.ino == k.ino && n.dev == k.dev && (n.reference != nil) == k.isReference && n.view == k.view
            }
        }

        subscript(key: Key) -> Inode? {
            bucket(key).map { nodes[bucket: $0].node }
        }

        /// Makes `node` the one that stands for its own key (in place of another).
        mutating func stand(_ node: Inode) {
            let k = Self.key(of: node)
            if let b = bucket(k) {
                nodes[bucket: b] = Keyed(node: node)
                return
            }
            if case .app = k.view, !views.contains(k.view) { views.append(k.view) }
            nodes.insertNew(Keyed(node: node))
        }

        /// Removes the node that stands for `key`, and returns it.
        mutating func removeValue(forKey key: Key) -> Inode? {
            guard let b = bucket(key) else { return nil }
            return nodes.remove(bucket: b).node
        }

        /// Removes `node` if it is the one that stands for its key; false if it is not.
        @discardableResult
        mutating func remove(_ node: Inode) -> Bool {
            guard let b = bucket(Self.key(of: node)), nodes[bucket: b].node === node else { return false }
            nodes.remove(bucket: b)
            return true
        }

        mutating func removeAll() { nodes.removeAll() }
    }

    /// The live nodes of one shard by id, with their lookup counts: 16 bytes a bucket (a
    /// Dictionary's was 24). Ids are handed out in order, and the table's Fibonacci hashing
    /// spreads ids in order evenly, so a lookup by id is most often one bucket; so the table
    /// may be fuller than one of random hashes before it grows.
    struct NodesByID {
        struct Entry: ProbedElement {
            var inode: Inode
            var lookups: UInt64
            var probeHash: UInt64 { inode.nodeID >> InodeTable.shardBits }
            /// Live ids mostly lie in a window smaller than the table, one bucket each.
            static var fullAtEighths: Int { 7 }
        }
        private var table = ProbedTable<Entry>()

        private func bucket(_ id: UInt64) -> Int? {
            table.find(hash: id >> InodeTable.shardBits) { $0.inode.nodeID == id }
        }

        subscript(id: UInt64) -> Inode? {
            bucket(id).map { table[bucket: $0].inode }
        }

        /// A node not here (a new id, or one forgotten and brought back), with one lookup.
        mutating func insert(_ inode: Inode) {
            table.insertNew(Entry(inode: inode, lookups: 1))
        }

        /// One more lookup of node `id`; nil if it is not here.
        mutating func addLookup(_ id: UInt64) -> Inode? {
            guard let b = bucket(id) else { return nil }
            table[bucket: b].lookups += 1
            return table[bucket: b].inode
        }

        /// The kernel forgets `n` lookups of node `id`: the node, removed, when none remain.
        mutating func dropLookups(_ id: UInt64, _ n: UInt64) -> Inode? {
            guard let b = bucket(id) else { return nil }
            if table[bucket: b].lookups > n {
                table[bucket: b].lookups -= n
                return nil
            }
            return table.remove(bucket: b).inode
        }

        var count: Int { table.count }
        var values: some Sequence<Entry> { table.elements }
        mutating func removeAll() { table.removeAll() }
    }

    /// One part of the table: the nodes of the backing files whose identity falls in it, by
    /// identity and by id, with their lookup counts, and the forgotten ones remembered. A node
    /// id names its part (its low `shardBits` bits), so a request that finds its node by id and
    /// one that finds it by backing file take the same single lock.
    private struct ShardState: ~Copyable {
        var byKey = IdentityMap()
        var byID = NodesByID()
        var remembered = RememberedNodes()
        /// The next id of this part, without its part's bits.
        var nextSerial: UInt64 = InodeTable.firstSerial
    }
    private final class Shard: Sendable {
        let state = Mutex(ShardState())
    }
    static let shardBits: UInt64 = 6
    private static let shardCount = 1 << shardBits
    /// Node ids of backing files start at 2^20 (below are the permanent virtual nodes').
    private static let firstSerial: UInt64 = 1 << (20 - shardBits)
    private let shards: [Shard] = (0..<InodeTable.shardCount).map { _ in Shard() }
    /// The part of node `id` (the one it was made in).
    @inline(__always)
    private func shard(_ id: UInt64) -> Shard { shards[Int(id & UInt64(Self.shardCount - 1))] }
    /// The part of a backing file: every view of it, and every node it ever had, is there.
    @inline(__always)
    private func shardIndex(dev: UInt64, ino: UInt64) -> Int {
        NodeSpread.part(dev: dev, ino: ino, bits: Self.shardBits)
    }
    @inline(__always)
    private func shard(dev: UInt64, ino: UInt64) -> Shard { shards[shardIndex(dev: dev, ino: ino)] }
    /// Every live node (a snapshot, part by part).
    private func allLive() -> [Inode] {
        var all = [Inode]()
        for sh in shards { sh.state.withLock { all.append(contentsOf: $0.byID.values.lazy.map(\.inode)) } }
        return all
    }
    /// How many forgotten nodes each part remembers (the limit spread over the parts, which
    /// backing files fall in evenly).
    private var rememberLimitPerShard: Int {
        rememberLimit == 0 ? 0 : (rememberLimit + Self.shardCount - 1) / Self.shardCount
    }
    /// Virtual nodes live for the whole mount and are never forgotten.
    private let permanent = Mutex<[UInt64: Inode]>([:])
    /// The process's descriptor budget (`DescriptorBudget.process`), which nodes also count
    /// against directly (they keep no reference to the table).
    var budget: DescriptorBudget { .process }
    private let anchors = AnchorTable()
    /// The backing folders of the nodes, watched for the kernel's cache (see KernelCacheWatch).
    let kernelWatch = KernelCacheWatch()
    /// How many forgotten nodes are remembered (measured: about 130 bytes each, so 34 MB at
    /// most; 330 before RememberedNodes); beyond it the oldest handles go stale.
    /// DOCDRIVE_REMEMBERED_NODES overrides it.
    let rememberLimit: Int

    init() {
        rememberLimit = Tunables.process.rememberedNodes
    }

    func addPermanent(_ inode: Inode) {
        permanent.withLock { $0[inode.nodeID] = inode }
    }

    func nextPermanentID() -> UInt64 {
        permanent.withLock { UInt64(2 + $0.count) }
    }

    @inline(__always)
    func get(_ id: UInt64) -> Inode? {
        if let e = shard(id).state.withLock({ $0.byID[id] }) { return e }
        return permanent.withLock { $0[id] }
    }

    /// Returns the inode for a backing file, creating it if new, and counts one lookup.
    /// Takes ownership of `fd`: closes it when an inode for the same file already exists.
    /// `fd`: the node's O_PATH descriptor, or -1 with `lazy` for a regular file to open on
    /// first use (a node already known then only learns where it was seen).
    func insertOrFind(fd: Int32, st: stat, root: BackingRoot, view: View, isTopLevel: Bool,
                      reference: ReferenceLink? = nil, lazy: Inode.LazyName? = nil) -> Inode {
        let key = Key(view: view, dev: UInt64(st.st_dev), ino: UInt64(st.st_ino), isReference: reference != nil)
        let part = shardIndex(dev: key.dev, ino: key.ino)
        let (inode, duplicate): (Inode, Bool) = shards[part].state.withLock { s in
            if let known = s.byKey[key], let found = s.byID.addLookup(known.nodeID) {
                return (found, true)
            }
            // A file the kernel forgot gets its node id back (a file handle names it by that id).
            let id: UInt64
            if let old = s.remembered.take(key: key) {
                id = old
            } else {
                id = s.nextSerial << Self.shardBits | UInt64(part)
                s.nextSerial += 1
            }
            let inode = Inode(nodeID: id, kind: .backing, fd: fd, dev: key.dev, ino: key.ino,
                              fileType: st.st_mode & S_IFMT, root: root, view: view, isTopLevel: isTopLevel,
                              reference: reference, lazy: fd < 0 ? lazy : nil)
            s.byID.insert(inode)
            s.byKey.stand(inode)
            return (inode, false)
        }
        if duplicate {
            if fd < 0 {
                if let lazy { inode.seen(at: lazy) }
            } else if !inode.adopt(fd) {
                Sys.close(fd)
            }
        } else if fd >= 0 {
            budget.opened()
            // Every filesystem met gets an anchor from its first folder, so that any of its
            // nodes can be closed and reopened by handle.
            if inode.isDirectory { anchors.ensure(dev: key.dev, folder: fd) }
        }
        if budget.isOver { sweep() }
        return inode
    }

    /// Closes idle nodes' descriptors until the budget's low mark (one sweeper at a time; the
    /// others go on). Nodes used since the last sweep are spared on the first pass.
    func sweep() {
        guard anchors.handlesUsable else { return budget.postpone() }
        guard budget.sweeping.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged else { return }
        defer { budget.sweeping.store(false, ordering: .releasing) }
        let nodes = allLive()
        for force in [false, true] {
            for n in nodes {
                if budget.open <= budget.low { return }
                _ = n.evict(force: force, anchors: anchors)
            }
        }
        // Nothing more could close (busy, deleted, no file handles): do not sweep on every
        // lookup from here on, only once the count has grown again.
        budget.postpone()
    }

    /// A file or folder was removed through the mount (its last name): see `Inode.closeRemoved`.
    /// The node also stops standing for its (dev, ino) at once, not only when the kernel's
    /// forget arrives: the backing filesystem hands the inode number to the next file it
    /// creates, and a lookup of that file in between must get a node of its own.
    /// Its handles go stale too (a forgotten node of it is no longer remembered).
    func removed(view: View, dev: UInt64, ino: UInt64) {
        let key = Key(view: view, dev: dev, ino: ino, isReference: false)
        shard(dev: dev, ino: ino).state.withLock { s -> Inode? in
            s.remembered.drop(key: key)
            return s.byKey.removeValue(forKey: key)
        }?.closeRemoved()
    }

    /// The file (dev, ino) was moved or replaced behind the kernel's back: its plain nodes in
    /// every view stop standing for it and answer ESTALE (see `Inode.closeReplaced`). Scans
    /// the file's part of the table: only editors' saves through references come here.
    func replacedBehind(dev: UInt64, ino: UInt64) {
        let nodes = shard(dev: dev, ino: ino).state.withLock { s -> [Inode] in
            let found = s.byID.values.map(\.inode).filter { n in n.dev == dev && n.ino == ino && n.reference == nil }
            for n in found {
                let key = Key(view: n.view, dev: dev, ino: ino, isReference: false)
                s.byKey.remove(n)
                s.remembered.drop(key: key)
            }
            return found
        }
        for n in nodes { n.closeReplaced() }
    }

    /// A file moved to `name` in `parent`: its node, if it was never opened, is to be opened there.
    func seen(view: View, dev: UInt64, ino: UInt64, at parent: Inode, _ name: UnsafePointer<CChar>) {
        let key = Key(view: view, dev: dev, ino: ino, isReference: false)
        // (A forgotten node needs nothing: the kernel looks the source up before a rename,
        // which brings the node back under its id, and it is remembered again at its new name.)
        guard let inode = shard(dev: dev, ino: ino).state.withLock({ $0.byKey[key] }) else { return }
        inode.seen(at: Inode.LazyName(parent: parent, name))
    }

    /// Counts one more lookup of a node already known (readdirplus of a cached entry, link).
    /// False if the node is no longer in the table (forgotten meanwhile).
    @discardableResult
    func addLookup(_ inode: Inode) -> Bool {
        shard(inode.nodeID).state.withLock { $0.byID.addLookup(inode.nodeID) != nil }
    }

    /// The kernel forgets `n` lookups; the inode and its descriptor go when none remain.
    func forget(_ id: UInt64, _ n: UInt64) {
        forget(CollectionOfOne((id, n)))
    }

    /// Several forgets (a BATCH_FORGET), each under its part's lock; descriptors close outside
    /// it. A forgotten backing node is remembered (see Remembered): its place is read outside
    /// the lock, before its descriptor closes.
    func forget(_ batch: some Collection<(UInt64, UInt64)>) {
        var dead = [Inode]()
        let limit = rememberLimitPerShard
        for (id, n) in batch {
            shard(id).state.withLock { s in
                guard let inode = s.byID.dropLookups(id, n) else { return }
                let key = IdentityMap.key(of: inode)
                let owned = s.byKey.remove(inode)
                dead.append(inode)
                if limit > 0, inode.kind == .backing, inode.reference == nil, let root = inode.root {
                    s.remembered.remember(id, Remembered(key: key, root: root, fileType: inode.fileType, isTopLevel: inode.isTopLevel,
                                              place: .dying(inode)), byKey: owned, limit: limit)
                }
            }
        }
        if dead.isEmpty { return }
        for inode in dead {
            let wd = inode.watch.exchange(-1, ordering: .relaxed)
            if wd >= 0 { kernelWatch.remove(wd) }
        }
        guard limit > 0 else {
            for inode in dead { inode.retire() }
            return
        }
        for inode in dead {
            let id = inode.nodeID
            let place = inode.kind == .backing && inode.reference == nil ? inode.placeForRemembering() : nil
            inode.retire()
            guard inode.kind == .backing, inode.reference == nil else { continue }
            shard(id).state.withLock { s in
                guard case .dying? = s.remembered[id]?.place else { return }  // revived or dropped meanwhile
                if let place { s.remembered.setPlace(id, place) } else { s.remembered.drop(id) }
            }
        }
    }

    /// Brings back a node the kernel forgot, under its old id, with one lookup counted (the
    /// kernel's LOOKUP of "." for a file handle). ESTALE if the file is gone or unknown.
    func revive(_ id: UInt64) throws(Errno) -> (Inode, stat) {
        let (fd, st, r) = try openRemembered(id, depth: 0)
        let (inode, spare): (Inode, Int32) = shard(id).state.withLock { s in
            if let e = s.byID.addLookup(id) {  // revived by another request meanwhile
                return (e, fd)
            }
            let inode = Inode(nodeID: id, kind: .backing, fd: fd, dev: r.key.dev, ino: r.key.ino, fileType: r.fileType,
                              root: r.root, view: r.key.view, isTopLevel: r.isTopLevel)
            s.byID.insert(inode)
            if s.byKey[r.key] == nil { s.byKey.stand(inode) }
            s.remembered.drop(id)
            return (inode, -1)
        }
        if spare >= 0 { Sys.close(spare) } else { budget.opened() }
        return (inode, st)
    }

    /// An O_PATH descriptor of the file a node id stood for, checked to be that file and not
    /// removed. Its folder may be a forgotten node too (`depth` bounds the climb).
    private func openRemembered(_ id: UInt64, depth: Int) throws(Errno) -> (Int32, stat, Remembered) {
        guard depth < 512, let r = shard(id).state.withLock({ $0.remembered[id] }) else { throw .staleNFSFileHandle }
        var place = r.place
        if case .dying(let inode) = place {
            guard let p = inode.placeForRemembering() else { throw .staleNFSFileHandle }
            place = p
        }
        let fd: Int32
        switch place {
        case .handle(let h):
            let anchor = anchors.anchor(dev: r.key.dev, node: -1, isDirectory: false)
            guard anchor >= 0 else { throw .staleNFSFileHandle }
            fd = h.withUnsafeBufferPointer { dd_open_by_handle(anchor, $0.baseAddress, Int32($0.count), Sys.O_PATH | Sys.O_NOFOLLOW) }
        case .name(let parentID, let name):
            let open = { (pfd: Int32) in name.withName { openat(pfd, $0, Sys.O_PATH | Sys.O_NOFOLLOW | Sys.O_CLOEXEC) } }
            if let p = get(parentID) {
                let pfd = try p.acquire()
                fd = open(pfd)
                p.release()
            } else {
                let (pfd, _, _) = try openRemembered(parentID, depth: depth + 1)
                fd = open(pfd)
                Sys.close(pfd)
            }
        case .dying:
            throw .staleNFSFileHandle
        }
        guard fd >= 0 else { throw .staleNFSFileHandle }
        guard let st = try? Sys.stat(fd: fd), UInt64(st.st_dev) == r.key.dev, UInt64(st.st_ino) == r.key.ino,
              st.st_nlink > 0, st.st_mode & S_IFMT == r.fileType else {
            Sys.close(fd)
            throw .staleNFSFileHandle
        }
        return (fd, st, r)
    }

    var count: Int { shards.reduce(0) { n, sh in n + sh.state.withLock { $0.byID.count } } }


    /// The live node of a backing file in the unified view (the view whose entries and
    /// attributes the kernel may keep long), nil if the kernel holds none.
    func unifiedNode(dev: UInt64, ino: UInt64) -> Inode? {
        let key = Key(view: .unified, dev: dev, ino: ino, isReference: false)
        return shard(dev: dev, ino: ino).state.withLock { $0.byKey[key] }
    }

    /// Every live node (for an overflow of the kernel cache's watch).
    var liveNodes: [Inode] { allLive() }

    /// The node ids the kernel knows for a backing folder (one per view), for invalidations:
    /// one lookup by key per view (a scan of every live node cost each file a sync brought
    /// down a walk of 100,000 nodes when the kernel held a large tree).
    func nodeIDs(dev: UInt64, ino: UInt64) -> [UInt64] {
        shard(dev: dev, ino: ino).state.withLock { s in
            s.byKey.views.compactMap { s.byKey[Key(view: $0, dev: dev, ino: ino, isReference: false)]?.nodeID }
        }
    }

    /// Closes every descriptor (at unmount).
    func removeAll() {
        kernelWatch.stop()
        var all = [Inode]()
        for sh in shards {
            sh.state.withLock { s in
                all.append(contentsOf: s.byID.values.map(\.inode))
                s.byID.removeAll()
                s.byKey.removeAll()
                s.remembered.removeAll()
            }
        }
        for i in all { i.closeForShutdown() }
        anchors.closeAll()
    }
}
