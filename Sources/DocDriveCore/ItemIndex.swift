// ItemIndex: the drive's SQLite index (GRDB): stable item ids, written in batches off the hot path.
import CDocDriveSys
import Foundation
import GRDB
import Synchronization

/// A change the file system reports; the index applies them in order, in batched transactions.
public enum ItemEvent: Sendable {
    /// A new item at (root, ino): it gets a fresh id, replacing whatever a reused inode number had.
    case created(root: String, ino: Int64, parentIno: Int64, name: String, kind: ItemKind)
    /// The item moved or was renamed inside its root; its id stays.
    case renamed(root: String, ino: Int64, parentIno: Int64, name: String)
    /// The item's last name is gone.
    case removed(root: String, ino: Int64)
    /// A file was renamed over another one (an editor's save-by-rename): the new file takes the
    /// replaced item's id, so references and bookmarks keep finding "the document".
    case replaced(root: String, ino: Int64, oldIno: Int64, parentIno: Int64, name: String)
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
/// Locks: `pending` protects the queue of events not yet written; `writeLock` serialises
/// batches so that events reach the database in the order they happened. `writeLock` is
/// taken before `pending`, never the other way round.
public final class ItemIndex: Sendable {
    let pool: DatabasePool
    private let pending = Mutex<[ItemEvent]>([])
    private let writeLock = Mutex<Void>(())
    private let wake = DispatchSemaphore(value: 0)
    private let stopped = Atomic<Bool>(false)
    private let lastError = Mutex<String?>(nil)
    /// The durable upload queue, in the same database.
    public let uploads: UploadQueue

    /// Opens (creating if needed) the index at `path` and migrates it.
    public init(path: String) throws(DriveError) {
        do {
            var config = Configuration()
            config.prepareDatabase { db in
                // WAL with NORMAL: a transaction is durable at the next checkpoint, never torn.
                try db.execute(sql: "PRAGMA synchronous = NORMAL")
            }
            config.busyMode = .timeout(10)
            pool = try DatabasePool(path: path, configuration: config)
            try Self.migrator.migrate(pool)
            uploads = UploadQueue(pool: pool)
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
        return m
    }

    // MARK: writing

    /// Queues an event; the writer thread applies it within a few milliseconds.
    public func record(_ event: ItemEvent) {
        let n = pending.withLock { p -> Int in
            p.append(event)
            return p.count
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
                let b = p
                p.removeAll(keepingCapacity: true)
                return b
            }
            guard !batch.isEmpty else { return }
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
        case let .created(root, ino, parentIno, name, kind):
            try db.cachedStatement(sql: """
                INSERT INTO item (id, root, ino, parentIno, name, kind, created) VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(root, ino) DO UPDATE SET id = excluded.id, parentIno = excluded.parentIno,
                  name = excluded.name, kind = excluded.kind, created = excluded.created
                """).execute(arguments: [newID(), root, ino, parentIno, name, kind.rawValue, now])
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
    static func newID() -> String {
        var b = idRandomness.withLock { $0.next16() }
        b[6] = (b[6] & 0x0F) | 0x40
        b[8] = (b[8] & 0x3F) | 0x80
        var out = [UInt8]()
        out.reserveCapacity(36)
        for (i, byte) in b.enumerated() {
            if i == 4 || i == 6 || i == 8 || i == 10 { out.append(UInt8(ascii: "-")) }
            out.append(Hex.digits[Int(byte >> 4)])
            out.append(Hex.digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Random bytes for item ids. Lock: leaf.
    private static let idRandomness = Mutex(RandomBuffer())

    // MARK: reading

    /// The stable id of the item at (root, ino), assigning one if the item was never seen.
    public func itemID(root: String, ino: Int64, parentIno: Int64, name: String, kind: ItemKind) throws(DriveError) -> String {
        flush()
        do {
            return try writeLock.withLock { _ in
                try pool.write { db -> String in
                    if let row = try ItemRecord.fetchOne(db, sql: "SELECT * FROM item WHERE root = ? AND ino = ?", arguments: [root, ino]) {
                        if row.parentIno != parentIno || row.name != name {
                            try db.execute(sql: "UPDATE item SET parentIno = ?, name = ? WHERE id = ?", arguments: [parentIno, name, row.id])
                        }
                        return row.id
                    }
                    let rec = ItemRecord(id: Self.newID(), root: root, ino: ino, parentIno: parentIno, name: name,
                                         kind: kind.rawValue, created: Date().timeIntervalSince1970)
                    try rec.insert(db)
                    return rec.id
                }
            }
        } catch {
            throw DriveError(.index, "The index could not give an id: \(error).", underlying: error)
        }
    }

    /// Number of items known, per root.
    public func counts() throws(DriveError) -> [String: Int] {
        do {
            return try pool.read { db in
                var r = [String: Int]()
                for row in try Row.fetchAll(db, sql: "SELECT root, COUNT(*) AS n FROM item GROUP BY root") {
                    r[row["root"]] = row["n"]
                }
                return r
            }
        } catch {
            throw DriveError(.index, "The index cannot be read: \(error).", underlying: error)
        }
    }

    public func item(id: String) throws(DriveError) -> ItemRecord? {
        do {
            return try pool.read { db in try ItemRecord.fetchOne(db, key: id) }
        } catch {
            throw DriveError(.index, "The index cannot be read: \(error).", underlying: error)
        }
    }
}

/// Random bytes drawn from the system generator 4 KiB at a time.
struct RandomBuffer: ~Copyable {
    private var bytes = [UInt8](repeating: 0, count: 4096)
    private var used = 4096

    mutating func next16() -> [UInt8] {
        if used + 16 > bytes.count {
            let filled = bytes.withUnsafeMutableBytes { dd_random($0.baseAddress, $0.count) }
            if filled != bytes.count {
                // getrandom cannot fail for 4 KiB once the pool is ready; never hand out zeros.
                var g = SystemRandomNumberGenerator()
                bytes.withUnsafeMutableBytes { raw in
                    for i in stride(from: 0, to: raw.count, by: 8) {
                        raw.storeBytes(of: g.next(), toByteOffset: i, as: UInt64.self)
                    }
                }
            }
            used = 0
        }
        defer { used += 16 }
        return Array(bytes[used..<(used + 16)])
    }
}
