// ItemIndex: the drive's SQLite index (GRDB): stable item ids, written in batches off the hot path.
import CDocDriveSys
import Foundation
import GRDB
import Synchronization

/// A change the file system reports; the index applies them in order, in batched transactions.
public enum ItemEvent: Sendable, Equatable {
    /// A new item at (root, ino): it gets a fresh id (made when the event is, so that the index
    /// can answer for it before the event is written), replacing whatever a reused inode number had.
    case created(root: String, ino: Int64, parentIno: Int64, name: String, kind: ItemKind, id: String = ItemIndex.newID())
    /// The item moved or was renamed inside its root; its id stays.
    case renamed(root: String, ino: Int64, parentIno: Int64, name: String)
    /// The item's last name is gone.
    case removed(root: String, ino: Int64)
    /// A file was renamed over another one (an editor's save-by-rename): the new file takes the
    /// replaced item's id, so references and bookmarks keep finding "the document".
    case replaced(root: String, ino: Int64, oldIno: Int64, parentIno: Int64, name: String)
    /// A file was created at a name another file of the same folder was renamed away from a
    /// moment before (an editor's rename-away save: vim's `name` -> `name~`, a new `name`, then
    /// `name~` deleted): the new file is the same document and takes that item's id; the
    /// renamed-away file becomes a new item (`freshID`), as iCloud Drive and Dropbox treat it.
    case reclaimed(root: String, ino: Int64, fromIno: Int64, parentIno: Int64, name: String, freshID: String = ItemIndex.newID())
    /// An item the index did not know was asked for its id: it gets `id`, unless it got one since.
    case assigned(root: String, ino: Int64, parentIno: Int64, name: String, kind: ItemKind, id: String)
}

extension ItemEvent {
    var root: String {
        switch self {
        case let .created(r, _, _, _, _, _), let .renamed(r, _, _, _), let .removed(r, _), let .replaced(r, _, _, _, _),
             let .reclaimed(r, _, _, _, _, _), let .assigned(r, _, _, _, _, _):
            return r
        }
    }

    /// Every inode number the event names.
    var inodes: [Int64] {
        switch self {
        case let .created(_, n, _, _, _, _), let .renamed(_, n, _, _), let .removed(_, n), let .assigned(_, n, _, _, _, _):
            return [n]
        case let .replaced(_, n, old, _, _):
            return [n, old]
        case let .reclaimed(_, n, from, _, _, _):
            return [n, from]
        }
    }

    /// The inode this event puts at (parent, name), if it places one.
    var place: (ino: Int64, parentIno: Int64, name: String)? {
        switch self {
        case let .created(_, n, p, name, _, _), let .renamed(_, n, p, name), let .replaced(_, n, _, p, name),
             let .reclaimed(_, n, _, p, name, _), let .assigned(_, n, p, name, _, _):
            return (n, p, name)
        case .removed:
            return nil
        }
    }
}

public enum ItemKind: String, Sendable {
    case file, directory, symlink, other
}

/// One row of the index.
public struct ItemRecord: Codable, FetchableRecord, PersistableRecord, Sendable, Equatable {
    public static let databaseTableName = "item"
    public var id: String
    public var root: String
    public var ino: Int64
    public var parentIno: Int64
    public var name: String
    public var kind: String
    public var created: Double
}

/// The index: one database per drive, one writer, batched transactions.
///
/// Locks: `pending` protects the events not yet written (queued, and the batch being written);
/// `writeLock` serialises batches so that events reach the database in the order they
/// happened. `writeLock` is taken before `pending`, never the other way round.
///
/// Readers on FUSE request threads (a reference finding its target, `user.docdrive.id`) never
/// wait for a write: they answer from the unwritten events first (`overlay`), then from a read
/// of the database, which in WAL mode does not wait for the writer.
public final class ItemIndex: Sendable {
    let pool: DatabasePool
    /// Reads on the sync and upload paths (no dispatch barrier per read).
    let readers: IndexReaders
    private let pending = Mutex(Unwritten())
    private let writeLock = Mutex<Void>(())
    private let wake = DispatchSemaphore(value: 0)
    private let stopped = Atomic<Bool>(false)
    private let lastError = Mutex<String?>(nil)
    /// The durable upload queue, in the same database.
    public let uploads: UploadQueue
    /// What this device and each store's remote last agreed on (the sync engine's base table).
    public let bases: BaseVersions

    /// Opens (creating if needed) the index at `path` and migrates it: the daemon's, and a
    /// command's that writes it with no daemon running.
    public convenience init(path: String) throws(DriveError) {
        try self.init(path: path, readingOnly: false)
    }

    /// Opens the index at `path` for reading only, as it is: nothing written, no migration (a
    /// newer command must not change the schema under an older running daemon). For the
    /// commands that only look (`status`, `sync` and `unmount` counting what waits).
    public convenience init(readingOnly path: String) throws(DriveError) {
        try self.init(path: path, readingOnly: true)
    }

    private init(path: String, readingOnly: Bool) throws(DriveError) {
        do {
            var config = Configuration()
            config.readonly = readingOnly
            if !readingOnly {
                config.prepareDatabase { db in
                    // WAL with NORMAL: a transaction is durable at the next checkpoint, never torn.
                    try db.execute(sql: "PRAGMA synchronous = NORMAL")
                }
            }
            config.busyMode = .timeout(10)
            pool = try DatabasePool(path: path, configuration: config)
            if !readingOnly { try Self.migrator.migrate(pool) }
            readers = IndexReaders(pool: pool)
            uploads = UploadQueue(pool: pool, readers: readers)
            bases = BaseVersions(pool: pool, readers: readers)
        } catch {
            throw DriveError(.index, "The index \(path) cannot be opened: \(error).", underlying: error)
        }
    }

    private static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1 items") { db in
            try db.create(table: "item") { t in
                t.column("id", .text).primaryKey()
                t.column("root", .text).notNull()
                t.column("ino", .integer).notNull()
                t.column("parentIno", .integer).notNull()
                t.column("name", .text).notNull()
                t.column("kind", .text).notNull()
                t.column("created", .double).notNull()
                t.uniqueKey(["root", "ino"])
            }
            try db.create(index: "item_parent", on: "item", columns: ["root", "parentIno", "name"])
        }
        UploadQueue.migrate(&m)
        Self.migrateDocuments(&m)
        BaseVersions.migrate(&m)
        return m
    }

    // MARK: writing

    /// Queues an event; the writer thread applies it within a few milliseconds.
    public func record(_ event: ItemEvent) {
        let n = pending.withLock { p -> Int in
            p.queued.append(event)
            p.recorded &+= 1
            return p.queued.count
        }
        if n == 1 { wake.signal() }
    }

    /// Starts the background writer (call once, from the daemon).
    public func startWriter() {
        let t = Thread { [self] in
            while !stopped.load(ordering: .relaxed) {
                _ = wake.wait(timeout: .now() + .milliseconds(200))
                usleep(50_000)  // group commit: a burst of operations becomes one transaction
                flush()
            }
        }
        t.name = "docdrive-index"
        t.start()
    }

    /// Writes everything queued so far; returns once it is in the database.
    public func flush() {
        writeLock.withLock { _ in
            let batch = pending.withLock { p -> [ItemEvent] in
                p.writing = p.queued
                p.queued.removeAll(keepingCapacity: true)
                return p.writing
            }
            guard !batch.isEmpty else { return }
            // The batch stays visible to readers (`overlay`) until it is in the database.
            defer { pending.withLock { $0.writing.removeAll(keepingCapacity: true) } }
            do {
                let now = Date().timeIntervalSince1970
                try pool.write { db in
                    for e in batch { try Self.apply(e, db, now: now) }
                }
                lastError.withLock { $0 = nil }  // remote-safety: a write that works again clears the report
            } catch {
                lastError.withLock { $0 = "\(error)" }
            }
        }
    }

    public func stop() {
        stopped.store(true, ordering: .relaxed)
        wake.signal()
        flush()
    }

    /// The last write failure, for status reports.
    public var writeError: String? { lastError.withLock { $0 } }

    /// Statements are prepared once per connection and reused (cachedStatement): a batch of
    /// thousands of events must not parse SQL thousands of times.
    private static func apply(_ e: ItemEvent, _ db: Database, now: Double) throws {
        switch e {
        case let .created(root, ino, parentIno, name, kind, id):
            // An id that came with a download (made on another device) moves here from a copy
            // this device had under another inode.
            try db.cachedStatement(sql: "DELETE FROM item WHERE id = ? AND NOT (root = ? AND ino = ?)").execute(arguments: [id, root, ino])
            try db.cachedStatement(sql: """
                INSERT INTO item (id, root, ino, parentIno, name, kind, created) VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(root, ino) DO UPDATE SET id = excluded.id, parentIno = excluded.parentIno,
                  name = excluded.name, kind = excluded.kind, created = excluded.created
                """).execute(arguments: [id, root, ino, parentIno, name, kind.rawValue, now])
        case let .assigned(root, ino, parentIno, name, kind, id):
            try db.cachedStatement(sql: """
                INSERT INTO item (id, root, ino, parentIno, name, kind, created) VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(root, ino) DO NOTHING
                """).execute(arguments: [id, root, ino, parentIno, name, kind.rawValue, now])
        case let .reclaimed(root, ino, fromIno, parentIno, name, freshID):
            let from = try Row.fetchOne(db, sql: "SELECT id FROM item WHERE root = ? AND ino = ?", arguments: [root, fromIno])
            guard let id: String = from?["id"] else {
                try apply(.created(root: root, ino: ino, parentIno: parentIno, name: name, kind: .file, id: freshID), db, now: now)
                return
            }
            try db.execute(sql: "DELETE FROM item WHERE root = ? AND ino = ?", arguments: [root, ino])
            try db.execute(sql: "UPDATE item SET id = ? WHERE id = ?", arguments: [freshID, id])
            try db.execute(sql: "INSERT INTO item (id, root, ino, parentIno, name, kind, created) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           arguments: [id, root, ino, parentIno, name, ItemKind.file.rawValue, now])
        case let .renamed(root, ino, parentIno, name):
            try db.cachedStatement(sql: "UPDATE item SET parentIno = ?, name = ? WHERE root = ? AND ino = ?")
                .execute(arguments: [parentIno, name, root, ino])
        case let .removed(root, ino):
            try db.cachedStatement(sql: "DELETE FROM item WHERE root = ? AND ino = ?").execute(arguments: [root, ino])
        case let .replaced(root, ino, oldIno, parentIno, name):
            let old = try Row.fetchOne(db, sql: "SELECT id FROM item WHERE root = ? AND ino = ?", arguments: [root, oldIno])
            guard let id: String = old?["id"] else {
                try apply(.renamed(root: root, ino: ino, parentIno: parentIno, name: name), db, now: now)
                return
            }
            try db.execute(sql: "DELETE FROM item WHERE root = ? AND ino = ?", arguments: [root, ino])
            try db.execute(sql: "UPDATE item SET ino = ?, parentIno = ?, name = ? WHERE id = ?", arguments: [ino, parentIno, name, id])
        }
    }

    /// A new item id: a random (version 4) UUID in lower case. Foundation's UUID() opens and
    /// reads /dev/urandom for each one; ids are taken from a buffer filled by getrandom instead.
    public static func newID() -> String {
        // (The lock covers two loads: FUSE threads creating files in parallel took it by turns,
        // and a copy into a new array inside it made them spin; perf, 8 writers.)
        let (hi, lo) = idRandomness.withLock { $0.next128() }
        var b = (hi.bigEndian, lo.bigEndian)
        return withUnsafeMutableBytes(of: &b) { raw in
            raw[6] = (raw[6] & 0x0F) | 0x40
            raw[8] = (raw[8] & 0x3F) | 0x80
            return String(unsafeUninitializedCapacity: 36) { out in
                var at = 0
                for i in 0..<16 {
                    if i == 4 || i == 6 || i == 8 || i == 10 {
                        out[at] = UInt8(ascii: "-")
                        at += 1
                    }
                    out[at] = Hex.digits[Int(raw[i] >> 4)]
                    out[at + 1] = Hex.digits[Int(raw[i] & 0x0F)]
                    at += 2
                }
                return at
            }
        }
    }

    /// Random bytes for item ids. Lock: leaf.
    private static let idRandomness = Mutex(RandomBuffer())

    // MARK: reading

    /// The stable id of the item at (root, ino), assigning one if the item was never seen.
    /// Never waits for a write: an id given here is recorded like any other event.
    public func itemID(root: String, ino: Int64, parentIno: Int64, name: String, kind: ItemKind) throws(DriveError) -> String {
        while true {
            let (answer, seen) = pending.withLock { p in (p.resolve(root: root, ino: ino), p.recorded) }
            if case .database(ino, nil, _) = answer, let row = try row(root: root, ino: ino) {
                if row.parentIno != parentIno || row.name != name {
                    record(.renamed(root: root, ino: ino, parentIno: parentIno, name: name))  // moved behind the mount's back
                }
                return row.id
            }
            if let id = try evaluate(answer, root: root) { return id }
            let id = Self.newID()
            let assigned: Int? = pending.withLock { p in
                guard p.recorded == seen else { return nil }  // something came in between: look again
                p.queued.append(.assigned(root: root, ino: ino, parentIno: parentIno, name: name, kind: kind, id: id))
                p.recorded &+= 1
                return p.queued.count
            }
            guard let n = assigned else { continue }
            if n == 1 { wake.signal() }
            return id
        }
    }

    /// The id of the item at (root, ino) if it has one (never assigns, never waits for a write).
    public func knownItemID(root: String, ino: Int64) throws(DriveError) -> String? {
        try evaluate(pending.withLock { $0.resolve(root: root, ino: ino) }, root: root)
    }

    /// The item's path inside `root` as the index knows it (from the names and parents the
    /// mount saw), or nil when a folder on the way is unknown. `rootIno`: the root folder's
    /// inode. Unwritten events count (never waits for a write).
    public func knownPath(id: String, root: String, rootIno: Int64) throws(DriveError) -> String? {
        let events = pending.withLock { $0.writing + $0.queued }
        // The item's inode now: one the unwritten events name, or its row's, that has its id.
        var candidates = [Int64]()
        for e in events.reversed() where e.root == root { candidates += e.inodes }
        do {
            if let row = try readers.readStatement({ db in try ItemRecord.fetchOne(db, key: id) }), row.root == root { candidates.append(row.ino) }
        } catch {
            throw DriveError(.index, "The index cannot be read: \(error).", underlying: error)
        }
        var ino: Int64?
        var tried = Set<Int64>()
        for c in candidates where tried.insert(c).inserted {
            if try knownItemID(root: root, ino: c) == id {
                ino = c
                break
            }
        }
        guard ino != nil else { return nil }
        // Up through the folders: each one's place from its newest event, else from its row.
        var parts = [String]()
        var at = ino!
        var seen = Set<Int64>()
        while at != rootIno {
            guard seen.insert(at).inserted, parts.count < 256 else { return nil }
            var found: (Int64, String)?
            for e in events.reversed() where e.root == root {
                if case let .removed(_, n) = e, n == at { return nil }
                if case let .replaced(_, _, old, _, _) = e, old == at { return nil }
                if let (n, parent, name) = e.place, n == at {
                    found = (parent, name)
                    break
                }
            }
            if found == nil, let row = try row(root: root, ino: at) { found = (row.parentIno, row.name) }
            guard let (parent, name) = found else { return nil }
            parts.append(name)
            at = parent
        }
        return parts.reversed().joined(separator: "/")
    }

    /// An answer of the unwritten events, completed by reads of the database.
    private func evaluate(_ answer: Unwritten.Answer, root: String) throws(DriveError) -> String? {
        switch answer {
        case .id(let id): return id
        case .none: return nil
        case let .database(ino, found, otherwise):
            if let row = try row(root: root, ino: ino) { return found ?? row.id }
            return try evaluate(otherwise, root: root)
        }
    }

    private func row(root: String, ino: Int64) throws(DriveError) -> ItemRecord? {
        do {
            return try readers.readStatement { db in
                try ItemRecord.fetchOne(db.cachedStatement(sql: "SELECT * FROM item WHERE root = ? AND ino = ?"), arguments: [root, ino])
            }
        } catch {
            throw DriveError(.index, "The index cannot be read: \(error).", underlying: error)
        }
    }

    /// Number of items with a stable id, as written (`docdrive status`): read through the
    /// readers, so it neither writes what is queued nor waits for the write lock.
    public func itemCount() throws(DriveError) -> Int {
        do {
            return try readers.readStatement { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM item") ?? 0 }
        } catch {
            throw DriveError(.index, "The index cannot be read: \(error).", underlying: error)
        }
    }

    /// The item's row (for commands and reports: waits for what is queued).
    public func item(id: String) throws(DriveError) -> ItemRecord? {
        flush()
        do {
            return try pool.read { db in try ItemRecord.fetchOne(db, key: id) }
        } catch {
            throw DriveError(.index, "The index cannot be read: \(error).", underlying: error)
        }
    }
}

/// The events not yet in the database: those queued, and the batch being written. Readers
/// resolve an item's id against them before they ask the database (see `resolve`).
struct Unwritten: ~Copyable {
    var queued: [ItemEvent] = []
    var writing: [ItemEvent] = []
    /// Counts every event queued: a reader that saw it unchanged knows nothing came in between.
    var recorded: UInt64 = 0

    /// What the unwritten events say of (root, ino)'s id.
    indirect enum Answer: Equatable {
        /// This id.
        case id(String)
        /// No id (removed, replaced, or never known).
        case none
        /// If the database has a row for (root, `ino`): its id, or `found` when that is set;
        /// if it has none, `otherwise`.
        case database(ino: Int64, found: String?, otherwise: Answer)

        /// This answer, with `fallback` where it comes to no id.
        func orElse(_ fallback: Answer) -> Answer {
            switch self {
            case .id: self
            case .none: fallback
            case let .database(i, f, o): .database(ino: i, found: f, otherwise: o.orElse(fallback))
            }
        }

        /// This answer, with `id` where it comes to an id.
        func whereFound(_ id: String) -> Answer {
            switch self {
            case .id: .id(id)
            case .none: .none
            case let .database(i, _, o): .database(ino: i, found: id, otherwise: o.whereFound(id))
            }
        }
    }

    func resolve(root: String, ino: Int64) -> Answer {
        if writing.isEmpty { return Self.resolve(root: root, ino: ino, in: queued[...]) }
        return Self.resolve(root: root, ino: ino, in: (writing + queued)[...])
    }

    /// Walks the events back from the newest, doing in reverse what `ItemIndex.apply` does.
    static func resolve(root: String, ino: Int64, in events: ArraySlice<ItemEvent>) -> Answer {
        var i = events.endIndex
        while i > events.startIndex {
            i -= 1
            let before = events[events.startIndex..<i]
            switch events[i] {
            case let .created(r, n, _, _, _, id) where r == root && n == ino:
                return .id(id)
            case let .assigned(r, n, _, _, _, id) where r == root && n == ino:
                // Written only if the item had no row: it had none when the id was assigned.
                return .id(id)
            case let .removed(r, n) where r == root && n == ino:
                return .none
            case let .replaced(r, n, old, _, _) where r == root:
                // The new file takes the replaced one's id; if that had none, it keeps its own.
                if n == ino { return resolve(root: root, ino: old, in: before).orElse(resolve(root: root, ino: ino, in: before)) }
                if old == ino { return .none }
            case let .reclaimed(r, n, from, _, _, fresh) where r == root:
                // The new file takes the renamed-away one's id (or `fresh` if it had none), and
                // the renamed-away one gets `fresh` if it had an id.
                if n == ino { return resolve(root: root, ino: from, in: before).orElse(.id(fresh)) }
                if from == ino { return resolve(root: root, ino: from, in: before).whereFound(fresh) }
            default:
                continue
            }
        }
        return .database(ino: ino, found: nil, otherwise: .none)
    }
}

/// Random bytes drawn from the system generator 4 KiB at a time.
struct RandomBuffer: ~Copyable {
    private var words = [UInt64](repeating: 0, count: 512)
    private var used = 512

    mutating func next128() -> (UInt64, UInt64) {
        if used + 2 > words.count {
            let size = words.count * 8
            let filled = words.withUnsafeMutableBytes { dd_random($0.baseAddress, $0.count) }
            if filled != size {
                // getrandom cannot fail for 4 KiB once the pool is ready; never hand out zeros.
                var g = SystemRandomNumberGenerator()
                for i in words.indices { words[i] = g.next() }
            }
            used = 0
        }
        defer { used += 2 }
        return (words[used], words[used + 1])
    }
}
