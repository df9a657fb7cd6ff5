// ItemIndex+Documents: what the document modes keep in the index: grants (which app may use
// which store item) and import copies (removed at unmount and at `app close`).
import Foundation
import GRDB

/// One grant: `app` may open the item `item` of the store at `root` through its own view.
public struct Grant: Codable, FetchableRecord, PersistableRecord, Sendable, Equatable, Hashable {
    public static let databaseTableName = "grant"
    public var app: String
    public var root: String
    public var item: String
    /// The item's path in its store when the grant was made (a hint; identity is `item`).
    public var path: String
    public var created: Double

    public init(app: String, root: String, item: String, path: String, created: Double) {
        self.app = app
        self.root = root
        self.item = item
        self.path = path
        self.created = created
    }
}

extension ItemIndex {
    static func migrateDocuments(_ m: inout DatabaseMigrator) {
        m.registerMigration("v3 grants and imports") { db in
            try db.create(table: "grant") { t in
                t.column("app", .text).notNull()
                t.column("root", .text).notNull()
                t.column("item", .text).notNull()
                t.column("path", .text).notNull()
                t.column("created", .double).notNull()
                t.primaryKey(["app", "root", "item"])
            }
            try db.create(table: "imported") { t in
                t.column("app", .text).notNull()
                t.column("name", .text).notNull()
                t.column("created", .double).notNull()
                t.primaryKey(["app", "name"])
            }
        }
    }

    private func readIndex<T>(_ body: (Database) throws -> T) throws(DriveError) -> T {
        do {
            return try readers.read(body)
        } catch {
            throw DriveError(.index, "The index cannot be read: \(error).", underlying: error)
        }
    }

    private func writeIndex<T>(_ body: (Database) throws -> T) throws(DriveError) -> T {
        flush()  // events queued before this write are applied first, in order
        do {
            return try pool.write(body)
        } catch {
            throw DriveError(.index, "The index cannot be written: \(error).", underlying: error)
        }
    }

    /// An item moved to another root (a document moved from a container into a store): it
    /// keeps its id. Whatever the target (root, ino) had is replaced.
    public func moveItem(id: String, toRoot: String, ino: Int64, parentIno: Int64, name: String) throws(DriveError) {
        try writeIndex { db in
            try db.execute(sql: "DELETE FROM item WHERE root = ? AND ino = ? AND id <> ?", arguments: [toRoot, ino, id])
            try db.execute(sql: "UPDATE item SET root = ?, ino = ?, parentIno = ?, name = ? WHERE id = ?",
                           arguments: [toRoot, ino, parentIno, name, id])
        }
    }

    // MARK: grants

    public func addGrant(_ g: Grant) throws(DriveError) {
        try writeIndex { db in try g.save(db) }
    }

    /// Removes a grant; false if there was none.
    @discardableResult
    public func removeGrant(app: String, root: String, item: String) throws(DriveError) -> Bool {
        try writeIndex { db in
            try db.execute(sql: "DELETE FROM \"grant\" WHERE app = ? AND root = ? AND item = ?", arguments: [app, root, item])
            return db.changesCount > 0
        }
    }

    public func grants(app: String? = nil) throws(DriveError) -> [Grant] {
        try readIndex { db in
            if let app {
                return try Grant.fetchAll(db, sql: "SELECT * FROM \"grant\" WHERE app = ? ORDER BY created", arguments: [app])
            }
            return try Grant.fetchAll(db, sql: "SELECT * FROM \"grant\" ORDER BY app, created")
        }
    }

    // MARK: import copies

    public func addImport(app: String, name: String) throws(DriveError) {
        try writeIndex { db in
            try db.execute(sql: "INSERT OR REPLACE INTO imported (app, name, created) VALUES (?, ?, ?)",
                           arguments: [app, name, Date().timeIntervalSince1970])
        }
    }

    public func imports(app: String? = nil) throws(DriveError) -> [(app: String, name: String)] {
        try readIndex { db in
            let rows = app == nil
                ? try Row.fetchAll(db, sql: "SELECT app, name FROM imported")
                : try Row.fetchAll(db, sql: "SELECT app, name FROM imported WHERE app = ?", arguments: [app])
            return rows.map { (app: $0["app"], name: $0["name"]) }
        }
    }

    public func removeImport(app: String, name: String) throws(DriveError) {
        try writeIndex { db in
            try db.execute(sql: "DELETE FROM imported WHERE app = ? AND name = ?", arguments: [app, name])
        }
    }
}
