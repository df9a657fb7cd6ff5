// InodeTable+Remembered: the nodes the kernel forgot, kept so that its file handles lead to the
// same files and a file looked up again keeps its node id.
#if canImport(Glibc)
import Glibc
#endif

extension InodeTable {
    /// A node the kernel forgot, kept so that a file handle the kernel gave out (the node id and
    /// generation 0, see FileSystem+Handles) leads to the same file as long as it exists, and
    /// so that the file keeps its node id when it is looked up again.
    struct Remembered {
        enum Place: @unchecked Sendable {  // see KeptName
            /// The backing file's own file handle (open_by_handle_at on the filesystem's anchor).
            case handle([UInt8])
            /// A file never opened: its name in a folder (a node id, live or remembered).
            /// A rename through the mount brings the node back first (the kernel looks the
            /// name up), so it is remembered at its new name; one behind the mount's back loses it.
            case name(parent: UInt64, name: KeptName)
            /// Being forgotten this moment: the place is still to be read from the node.
            case dying(Inode)
        }
        let key: Key
        let root: BackingRoot
        let fileType: mode_t
        let isTopLevel: Bool
        var place: Place
    }

    /// The forgotten nodes remembered (see Remembered), by id and by backing identity, oldest
    /// first. One object each (a 96-byte block), found from two tables of 8-byte buckets: two
    /// Dictionaries of the whole record and of the key (an 80-byte and a 48-byte bucket) made a
    /// forgotten node cost about 330 bytes, so that the daemon grew from 71 to 108 MB when the
    /// kernel forgot a walk of 100,000 files.
    struct RememberedNodes {
        /// A remembered node's fields, in the order of their size (no padding between them).
        private final class Record {
            let id: UInt64
            let dev: UInt64
            let ino: UInt64
            let view: View
            let root: BackingRoot
            var place: Remembered.Place
            let fileType: mode_t
            let isTopLevel: Bool
            /// Found by its key too (it stood for its key when it was forgotten, and no node
            /// remembered later took the key).
            var byKey: Bool

            init(id: UInt64, _ r: Remembered, byKey: Bool) {
                self.id = id
                dev = r.key.dev
                ino = r.key.ino
                view = r.key.view
                root = r.root
                place = r.place
                fileType = r.fileType
                isTopLevel = r.isTopLevel
                self.byKey = byKey
            }

            var remembered: Remembered {
                Remembered(key: Key(view: view, dev: dev, ino: ino), root: root, fileType: fileType,
                           isTopLevel: isTopLevel, place: place)
            }
        }
        private struct ByID: ProbedElement {
            let record: Record
            var probeHash: UInt64 { record.id }
            static var fullAtEighths: Int { 7 }
        }
        private struct ByKey: ProbedElement {
            let record: Record
            var probeHash: UInt64 { NodeSpread.hash(dev: record.dev, ino: record.ino) }
        }
        private var byID = ProbedTable<ByID>()
        private var byKey = ProbedTable<ByKey>()
        /// Remembered ids, oldest first from `oldest`: beyond the limit the oldest go.
        private var order: [UInt64] = []
        private var oldest = 0

        var count: Int { byID.count }

        private func bucket(_ id: UInt64) -> Int? { byID.find(hash: id) { $0.record.id == id } }

        private func bucket(_ k: Key) -> Int? {
            guard !k.isReference, byKey.count > 0 else { return nil }  // a reference's node is never remembered
            return byKey.find(hash: NodeSpread.hash(dev: k.dev, ino: k.ino)) { e in
                let r = e.record
                return r.ino == k.ino && r.dev == k.dev && r.view == k.view
            }
        }

        subscript(id: UInt64) -> Remembered? {
            bucket(id).map { byID[bucket: $0].record.remembered }
        }

        /// The place of a node being forgotten, now read (a node not remembered is left so).
        mutating func setPlace(_ id: UInt64, _ place: Remembered.Place) {
            if let b = bucket(id) { byID[bucket: b].record.place = place }
        }

        /// The id remembered for `key`, no longer remembered (the file is looked up again).
        mutating func take(key: Key) -> UInt64? {
            guard let b = bucket(key) else { return nil }
            let id = byKey[bucket: b].record.id
            drop(id)
            return id
        }

        /// Forgets the node remembered for `key` (its handles go stale).
        mutating func drop(key: Key) {
            if let b = bucket(key) { drop(byKey[bucket: b].record.id) }
        }

        mutating func drop(_ id: UInt64) {
            guard let b = bucket(id) else { return }
            let r = byID.remove(bucket: b).record
            if r.byKey, let k = byKey.find(hash: NodeSpread.hash(dev: r.dev, ino: r.ino), { $0.record === r }) {
                byKey.remove(bucket: k)
            }
        }

        mutating func remember(_ id: UInt64, _ r: Remembered, byKey inKeyTable: Bool, limit: Int) {
            drop(id)
            if inKeyTable, let b = bucket(r.key) {  // an older node of the file stays found by its id only
                byKey.remove(bucket: b).record.byKey = false
            }
            let record = Record(id: id, r, byKey: inKeyTable)
            byID.insertNew(ByID(record: record))
            if inKeyTable { byKey.insertNew(ByKey(record: record)) }
            order.append(id)
            while count > limit, oldest < order.count {
                drop(order[oldest])
                oldest += 1
            }
            if oldest > 4096, oldest * 2 > order.count {
                order.removeFirst(oldest)
                oldest = 0
            }
            // Nodes forgotten, brought back and forgotten again appear more than once: keep
            // each id's latest place only, now and then (linear, amortised over `limit` forgets).
            if order.count - oldest > 2 * limit + 4096 {
                var kept = Set<UInt64>()
                let latest = order[oldest...].reversed().filter { bucket($0) != nil && kept.insert($0).inserted }
                order = latest.reversed()
                oldest = 0
            }
        }

        mutating func removeAll() {
            byID.removeAll()
            byKey.removeAll()
            order = []
            oldest = 0
        }
    }
}
