// BaseVersions: per (store, path), what this device and the remote last agreed on: the item's id,
// the remote version last seen and the local version last synced (DESIGN.md 9). Every remote
// write and delete is conditional on the remote version kept here. Also the conflicts this
// device kept as copies, until the copy is gone.
import Foundation
import GRDB
import Synchronization

/// One row: `SyncBase` with the item's id.
public struct BaseRow: Equatable, Sendable {
    public var path: StorePath
    public var id: String?
    public var kind: SyncEntry.Kind
    public var localToken: String
    public var remoteToken: String
    /// The version `remoteToken` was written over (`RemoteMeta.parent`), where the remote says.
    public var parent: String?

    public init(path: StorePath, id: String?, kind: SyncEntry.Kind, localToken: String, remoteToken: String, parent: String? = nil) {
        self.path = path
        self.id = id
        self.kind = kind
        self.localToken = localToken
        self.remoteToken = remoteToken
        self.parent = parent
    }

    public var base: SyncBase {
        SyncBase(path: path.description, kind: kind, localToken: localToken, remoteToken: remoteToken, parent: parent)
    }
}

/// The bases of a store whose paths are stored in one form (UTF-8 or not), in the order of the
/// paths' bytes, read a page at a time: a walk of the local copy in the same order meets each
/// of them once, with no map of every base (a store of 100,000 items: about 55 MB).
public struct BasesInOrder {
    let bases: BaseVersions
    let root: String
    let utf8: Bool
    private var page: [BaseRow] = []
    private var at = 0
    private var done = false
    static let pageSize = 1000

    public init(_ bases: BaseVersions, root: String, utf8: Bool) {
        self.bases = bases
        self.root = root
        self.utf8 = utf8
    }

    /// The next base, nil after the last.
    public mutating func next() throws(DriveError) -> BaseRow? {
        guard let b = try peek() else { return nil }
        at += 1
        return b
    }

    /// The base of `path`. The walk has passed every base before it: each goes to `passed`.
    public mutating func take(_ path: StorePath, passed: (BaseRow) -> Void) throws(DriveError) -> BaseRow? {
        while let b = try peek(), b.path < path {
            passed(b)
            at += 1
        }
        guard let b = try peek(), b.path == path else { return nil }
        at += 1
        return b
    }

    private mutating func peek() throws(DriveError) -> BaseRow? {
        if at == page.count, !done {
            page = try bases.page(root: root, utf8: utf8, after: page.last?.path, limit: Self.pageSize)
            at = 0
            done = page.count < Self.pageSize
        }
        return at < page.count ? page[at] : nil
    }
}

/// A conflict kept as a copy beside the document.
public struct ConflictRecord: Equatable, Sendable, Codable {
    public var store: String
    public var path: String
    public var copy: String
    public var device: String
    public var time: Double
}

public final class BaseVersions: Sendable {
    let pool: DatabasePool
    let readers: IndexReaders

    init(pool: DatabasePool, readers: IndexReaders) {
        self.pool = pool
        self.readers = readers
    }

    static func migrate(_ m: inout DatabaseMigrator) {
        m.registerMigration("v5 sync bases") { db in
            try db.create(table: "syncBase") { t in
                t.column("root", .text).notNull()
                t.column("path", .text).notNull()
                t.column("id", .text)
                t.column("kind", .text).notNull()
                t.column("localToken", .text).notNull()
                t.column("remoteToken", .text).notNull()
                t.primaryKey(["root", "path"])
            }
            try db.create(index: "syncBase_id", on: "syncBase", columns: ["root", "id"])
            try db.create(table: "syncConflict") { t in
                t.column("root", .text).notNull()
                t.column("path", .text).notNull()
                t.column("copy", .text).notNull()
                t.column("device", .text).notNull()
                t.column("time", .double).notNull()
                t.primaryKey(["root", "copy"])
            }
        }
        m.registerMigration("v6 base parents") { db in
            try db.alter(table: "syncBase") { t in t.add(column: "parent", .text) }
        }
    }

    /// Counts the writes of the table (for every store of the drive), each once it ended: a
    /// poll that reads the bases after reading this sees every write counted by then.
    private let writes = Atomic<UInt64>(0)
    var generation: UInt64 { writes.load(ordering: .acquiring) }

    private func write<T>(_ body: (Database) throws -> T) throws(DriveError) -> T {
        defer { writes.add(1, ordering: .releasing) }
        do { return try pool.write(body) } catch {
            throw DriveError(.index, "The sync table cannot be written: \(error).", underlying: error)
        }
    }

    private func read<T>(_ body: (Database) throws -> T) throws(DriveError) -> T {
        do { return try readers.read(body) } catch {
            throw DriveError(.index, "The sync table cannot be read: \(error).", underlying: error)
        }
    }

    /// The columns a base is read from, in `row`'s order. Read by position: found by name (a
    /// case-blind search of the row's column names, per column and row), reading every base
    /// in a poll of a 30,000-item store took 1.8 times as long.
    private static let columns = "path, id, kind, localToken, remoteToken, parent"

    /// One statement (`IndexReaders.readStatement`).
    private func readStatement<T>(_ body: (Database) throws -> T) throws(DriveError) -> T {
        do { return try readers.readStatement(body) } catch {
            throw DriveError(.index, "The sync table cannot be read: \(error).", underlying: error)
        }
    }

    private static func row(_ r: Row) -> BaseRow {
        BaseRow(path: r[0], id: r[1], kind: SyncEntry.Kind(rawValue: r[2]) ?? .file,
                localToken: r[3], remoteToken: r[4], parent: r[5])
    }

    // The statements a sync runs for every path are compiled once per connection (cached).

    public func base(root: String, path: StorePath) throws(DriveError) -> BaseRow? {
        try readStatement { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT \(Self.columns) FROM syncBase WHERE root = ? AND path = ?"), arguments: [root, path])
                .map(Self.row)
        }
    }

    public func base(root: String, id: String) throws(DriveError) -> BaseRow? {
        try readStatement { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT \(Self.columns) FROM syncBase WHERE root = ? AND id = ?"), arguments: [root, id])
                .map(Self.row)
        }
    }

    public func all(root: String) throws(DriveError) -> [BaseRow] {
        var out = [BaseRow]()
        try forEach(root: root) { out.append($0) }
        return out
    }

    /// Calls `body` with each base of `root`, one row at a time (a store of 100,000 items: no
    /// array of GRDB rows, about 700 bytes each, beside the bases made of them). `body` runs
    /// inside the read and must not use the index.
    public func forEach(root: String, _ body: (BaseRow) throws -> Void) throws(DriveError) {
        try read { db in
            let rows = try Row.fetchCursor(db, sql: "SELECT \(Self.columns) FROM syncBase WHERE root = ?", arguments: [root])
            while let r = try rows.next() { try body(Self.row(r)) }
        }
    }

    /// At most `limit` bases of `root` whose paths are stored in one form (`utf8`: TEXT, else a
    /// BLOB), in the order of the paths' bytes, from the first after `after` (nil: the first).
    /// A range of the primary key: SQLite orders TEXT by its bytes and every TEXT before every
    /// BLOB (`x''`, the empty BLOB, is the first BLOB).
    public func page(root: String, utf8: Bool, after: StorePath?, limit: Int) throws(DriveError) -> [BaseRow] {
        let range: String, arguments: StatementArguments
        switch (utf8, after) {
        case (true, nil): (range, arguments) = ("path < x''", [root, limit])
        case (true, let a?): (range, arguments) = ("path > ? AND path < x''", [root, a, limit])
        case (false, nil): (range, arguments) = ("path >= x''", [root, limit])
        case (false, let a?): (range, arguments) = ("path > ?", [root, Data(a.bytes), limit])
        }
        return try read { db in
            try Row.fetchAll(db.cachedStatement(sql: "SELECT \(Self.columns) FROM syncBase WHERE root = ? AND \(range) ORDER BY path LIMIT ?"),
                             arguments: arguments).map(Self.row)
        }
    }

    /// The bases of the paths below the folder `folder`: a range of the primary key in each of
    /// the forms a path is stored in (TEXT, a BLOB when it is not UTF-8), not a scan of the store
    /// (a folder's delete, rename or move in a store of 100,000 items read them all).
    public func below(root: String, folder: StorePath) throws(DriveError) -> [BaseRow] {
        guard !folder.bytes.isEmpty else { return try all(root: root) }
        return try read { db in
            var out = [BaseRow]()
            for (l, h) in Self.ranges(below: folder) {
                let rows = try Row.fetchCursor(db.cachedStatement(sql: "SELECT \(Self.columns) FROM syncBase WHERE root = ? AND path >= ? AND path < ?"),
                                               arguments: [root, l, h])
                while let r = try rows.next() { out.append(Self.row(r)) }
            }
            return out
        }
    }

    /// The ranges [low, high) of the `path` column that hold the paths below `folder` (not the
    /// store's root): the BLOB form, and the TEXT form where the folder's name is UTF-8. SQLite
    /// orders TEXT by its bytes and every TEXT before every BLOB, so neither range holds the
    /// other's paths, and "a/" ≤ p < "a0" is exactly the paths that begin with "a/".
    private static func ranges(below folder: StorePath) -> [(DatabaseValue, DatabaseValue)] {
        let low = folder.bytes + [UInt8(ascii: "/")]
        let high = folder.bytes + [UInt8(ascii: "/") + 1]
        var out = [(Data(low).databaseValue, Data(high).databaseValue)]
        if let l = String(validating: low, as: UTF8.self), let h = String(validating: high, as: UTF8.self) {
            out.append((l.databaseValue, h.databaseValue))
        }
        return out
    }

    public func count(root: String) throws(DriveError) -> Int {
        try read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM syncBase WHERE root = ?", arguments: [root]) ?? 0 }
    }

    /// Records (or replaces) the base of `row.path` (hard links: several paths share an id).
    public func put(root: String, _ row: BaseRow) throws(DriveError) {
        try write { db in
            try db.cachedStatement(sql: """
                INSERT INTO syncBase (root, path, id, kind, localToken, remoteToken, parent) VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(root, path) DO UPDATE SET id = excluded.id, kind = excluded.kind,
                  localToken = excluded.localToken, remoteToken = excluded.remoteToken, parent = excluded.parent
                """).execute(arguments: [root, row.path, row.id, row.kind.rawValue, row.localToken, row.remoteToken, row.parent])
        }
    }

    /// Records many bases in one transaction (placeholders made in bulk).
    public func putAll(root: String, _ rows: [BaseRow]) throws(DriveError) {
        guard !rows.isEmpty else { return }
        try write { db in
            let statement = try db.cachedStatement(sql: """
                INSERT INTO syncBase (root, path, id, kind, localToken, remoteToken, parent) VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(root, path) DO UPDATE SET id = excluded.id, kind = excluded.kind,
                  localToken = excluded.localToken, remoteToken = excluded.remoteToken, parent = excluded.parent
                """)
            for row in rows {
                try statement.execute(arguments: [root, row.path, row.id, row.kind.rawValue, row.localToken, row.remoteToken, row.parent])
            }
        }
    }

    public func remove(root: String, path: StorePath) throws(DriveError) {
        try write { db in try db.execute(sql: "DELETE FROM syncBase WHERE root = ? AND path = ?", arguments: [root, path]) }
    }

    /// `from` (and, for a folder, everything under it) is now at `to`.
    public func move(root: String, from: StorePath, to: StorePath) throws(DriveError) {
        try write { db in
            let prefix = from.bytes + [UInt8(ascii: "/")]
            var paths = [from]
            if !from.bytes.isEmpty {
                for (l, h) in Self.ranges(below: from) {
                    paths += try StorePath.fetchAll(db, sql: "SELECT path FROM syncBase WHERE root = ? AND path >= ? AND path < ?", arguments: [root, l, h])
                }
            }
            for p in paths {
                let moved: StorePath
                if p == from { moved = to } else if p.bytes.starts(with: prefix) {
                    moved = StorePath(bytes: to.bytes + p.bytes[from.bytes.count...])
                } else { continue }
                try db.execute(sql: "DELETE FROM syncBase WHERE root = ? AND path = ?", arguments: [root, moved])
                try db.execute(sql: "UPDATE syncBase SET path = ? WHERE root = ? AND path = ?", arguments: [moved, root, p])
            }
        }
    }

    // MARK: conflicts

    public func addConflict(root: String, _ c: ConflictRecord) throws(DriveError) {
        try write { db in
            try db.execute(sql: "INSERT OR REPLACE INTO syncConflict (root, path, copy, device, time) VALUES (?, ?, ?, ?, ?)",
                           arguments: [root, c.path, c.copy, c.device, c.time])
        }
    }

    public func conflicts(root: String? = nil) throws(DriveError) -> [(root: String, ConflictRecord)] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM syncConflict WHERE ? IS NULL OR root = ? ORDER BY time", arguments: [root, root]).map {
                let r: String = $0["root"]
                return (r, ConflictRecord(store: RootKey(r)?.storeName ?? r, path: $0["path"], copy: $0["copy"],
                                          device: $0["device"], time: $0["time"]))
            }
        }
    }

    public func removeConflict(root: String, copy: String) throws(DriveError) {
        try write { db in try db.execute(sql: "DELETE FROM syncConflict WHERE root = ? AND copy = ?", arguments: [root, copy]) }
    }

    /// Whether `path` is a document in conflict or a conflict copy.
    public func inConflict(root: String, path: String) -> Bool {
        (try? read { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM syncConflict WHERE root = ? AND (path = ? OR copy = ?)", arguments: [root, path, path]) ?? 0
        }) ?? 0 > 0
    }
}
