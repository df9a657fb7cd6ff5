// QueryIndex: what `docdrive query` searches: one row per item of every backing folder (name,
// folded name, kind, size, mtime, tags, reference target) in its own SQLite database, kept up to
// date from the backing folders (QueryWatcher) and answering expressions (QueryNode) in SQL.
import CDocDriveSys
import Foundation
import GRDB
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One result of a query.
public struct QueryHit: Sendable, Equatable {
    public var root: String
    public var path: String
    public var name: String
    public var kind: String
    public var size: Int64
    public var mtime: Double
    public var external: Bool

    public var key: QueryKey { QueryKey(root: root, path: path) }
}

public struct QueryKey: Hashable, Sendable {
    public var root: String
    public var path: String
    public init(root: String, path: String) {
        self.root = root
        self.path = path
    }
}

/// What a query searches: the seeds' scopes, a store, an app, or a folder of the mount.
public enum QueryScope: Sendable, Equatable {
    case documents, data, external
    /// One root, or a folder inside it ("" for the whole root).
    case folder(root: String, prefix: String)
    case app(String)
}

public enum QuerySort: String, Sendable {
    case name, size, modified
}

/// One row as stored (public for the unit tests).
public struct QueryRow: Equatable, Sendable {
    public var root: String
    public var path: String
    public var name: String
    public var kind: String
    public var size: Int64
    public var mtime: Double
    /// ",a,b," (folded), or ""; nil: as the row has them (not read again).
    public var tags: String?
    public var ref: Bool
    public var targetRoot: String?
    public var targetPath: String?

    public init(root: String, path: String, name: String, kind: String, size: Int64, mtime: Double, tags: String?,
                ref: Bool, targetRoot: String?, targetPath: String?) {
        self.root = root
        self.path = path
        self.name = name
        self.kind = kind
        self.size = size
        self.mtime = mtime
        self.tags = tags
        self.ref = ref
        self.targetRoot = targetRoot
        self.targetPath = targetPath
    }
}

/// The query database. Writes come from one thread at a time (the watcher); reads from any.
///
/// One connection, not a pool: a pool gives every reader connection a page cache of its own (it
/// was 16 MB each); one connection keeps the index's memory to one 4 MB cache. A query waits for
/// the watcher's transaction in progress (a burst of at most 80 ms, or one chunk of the walk).
public final class QueryIndex: Sendable {
    let database: DatabaseQueue
    /// The folded names in memory, which a name query scans (built by `rebuildNames`).
    let names = QueryNames()

    /// Rows per transaction when walking (the walk at mount and the reconcile).
    static let walkChunk = 1000

    public init(path: String, itemIndexPath: String?) throws(DriveError) {
        do {
            database = try Self.open(path: path, itemIndexPath: itemIndexPath)
        } catch {
            // A cache: one that cannot be opened (a crash during a write, with the journal in
            // memory) is rebuilt by the walk.
            for suffix in ["", "-journal", "-wal", "-shm"] { unlink(path + suffix) }
            do {
                database = try Self.open(path: path, itemIndexPath: itemIndexPath)
            } catch {
                throw DriveError(.index, "The query index \(path) cannot be opened: \(error).", underlying: error)
            }
        }
        self.hasItemIndex = itemIndexPath != nil
    }

    private static func open(path: String, itemIndexPath: String?) throws -> DatabaseQueue {
        var config = Configuration()
        config.prepareDatabase { db in
            // A cache, rebuilt by the walk at mount: no fsync, the rollback journal in memory (a WAL
            // wrote every changed page twice, into the log and again at each checkpoint), and the
            // file locked once for the daemon's life instead of by fcntl at every transaction.
            // "main." everywhere: without it the pragmas would also apply to the attached index.
            try db.execute(sql: "PRAGMA main.journal_mode = MEMORY")
            try db.execute(sql: "PRAGMA main.synchronous = OFF")
            try db.execute(sql: "PRAGMA main.locking_mode = EXCLUSIVE")
            // The one connection's page cache: 4 MB holds the pages a burst of creates touches
            // (the ends of the table and of its indexes); queries that scan read through it.
            try db.execute(sql: "PRAGMA main.cache_size = -4096")
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
            if let itemIndexPath {
                // Upload states come from the drive's index (read only, never written here).
                try db.execute(sql: "ATTACH DATABASE ? AS idx", arguments: [itemIndexPath])
            }
        }
        config.busyMode = .timeout(10)
        let queue = try DatabaseQueue(path: path, configuration: config)
        var m = DatabaseMigrator()
        m.registerMigration("v1 entries") { db in
            try db.execute(sql: """
                CREATE TABLE entry (
                  root TEXT NOT NULL, path TEXT NOT NULL, name TEXT NOT NULL, fold TEXT NOT NULL,
                  kind TEXT NOT NULL, size INTEGER NOT NULL, mtime REAL NOT NULL, tags TEXT NOT NULL,
                  ref INTEGER NOT NULL, targetRoot TEXT, targetPath TEXT, conflict INTEGER NOT NULL,
                  PRIMARY KEY (root, path));
                CREATE INDEX entry_kind_size ON entry (kind, size);
                CREATE INDEX entry_size ON entry (size);
                CREATE INDEX entry_mtime ON entry (mtime);
                CREATE INDEX entry_target ON entry (targetRoot, targetPath) WHERE ref = 1;
                """)
        }
        m.registerMigration("v2 fewer indexes") { db in
            // Every index is written by every create; a size or date query alone scans the
            // table instead (about 10 ms for 100,000 rows).
            try db.execute(sql: "DROP INDEX entry_size; DROP INDEX entry_mtime")
        }
        m.registerMigration("v3 no trigram table") { db in
            // An FTS5 trigram table over the names (kept by triggers) answered a name in well
            // under 1 ms instead of an 8-17 ms scan, but each insert and delete cost 17-39 µs more
            // of SQLite's time (10,000 of each, measured with Python's sqlite3 over a copy of a
            // 100,000-row index): most of the index thread's work during unlink and tar x. Gone
            // again; this drops it from a database that had it.
            try db.execute(sql: """
                DROP TRIGGER IF EXISTS entry_names_insert; DROP TRIGGER IF EXISTS entry_names_delete;
                DROP TRIGGER IF EXISTS entry_names_update; DROP TABLE IF EXISTS entry_names;
                """)
        }
        m.registerMigration("v4 folded names indexed") { db in
            // Names are still scanned, but through this index (about 3.5 MB for 100,000 rows,
            // which the 4 MB page cache holds) instead of the 20 MB table, which the cache did
            // not hold, so every scan read it again page by page. Python's sqlite3 over a copy
            // of a 100,000-row index: "zebra" (3 hits) 12.4 ms without, 7.1 ms with; "report"
            // (9,818 hits) 23.8 ms against 27.4 ms (a lookup per hit); 10,000 inserts and
            // deletes cost 0.5 µs more each.
            try db.execute(sql: "CREATE INDEX entry_fold ON entry (fold)")
        }
        try m.migrate(queue)
        return queue
    }

    let hasItemIndex: Bool

    // MARK: writing (the watcher's thread)

    /// Applies upserts and deletions (a folder's deletion takes its subtree) in one transaction;
    /// returns every key whose row appeared, changed or went.
    public func apply(upserts: [QueryRow], deletes: [QueryKey], subtreeDeletes: [QueryKey]) throws -> [QueryKey] {
        var written = [(Int64, String)]()
        // A deferred transaction: GRDB's default (IMMEDIATE) begins a write on every attached
        // database, so each batch held the drive's index's write lock too, and waited for the
        // sync's and the uploader's writes (a batch given up after 10 s was lost until the next
        // walk). This one writes only its own file and reads nothing of the attached index.
        var changed = [QueryKey]()
        try database.writeWithoutTransaction { db in try db.inTransaction(.deferred) {
            for k in subtreeDeletes {
                let lo = k.path.isEmpty ? "" : k.path + "/"
                let hi = k.path.isEmpty ? "\u{10FFFF}" : k.path + "0"  // "0" follows "/"
                let gone = try String.fetchAll(db, sql: "SELECT path FROM entry WHERE root = ? AND path >= ? AND path < ?",
                                               arguments: [k.root, lo, hi])
                if !gone.isEmpty {
                    try db.execute(sql: "DELETE FROM entry WHERE root = ? AND path >= ? AND path < ?", arguments: [k.root, lo, hi])
                    changed += gone.map { QueryKey(root: k.root, path: $0) }
                }
            }
            for k in deletes {
                try db.cachedStatement(sql: "DELETE FROM entry WHERE root = ? AND path = ?").execute(arguments: [k.root, k.path])
                if db.changesCount > 0 { changed.append(k) }
            }
            // One statement per row: it writes only when something the queries see changed
            // (a close after a write that changed nothing costs no write).
            let upsert = try db.cachedStatement(sql: """
                INSERT INTO entry (root, path, name, fold, kind, size, mtime, tags, ref, targetRoot, targetPath, conflict)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, coalesce(?8, ''), ?9, ?10, ?11, ?12)
                ON CONFLICT(root, path) DO UPDATE SET name = excluded.name, fold = excluded.fold, kind = excluded.kind,
                  size = excluded.size, mtime = excluded.mtime, tags = coalesce(?8, entry.tags), ref = excluded.ref,
                  targetRoot = excluded.targetRoot, targetPath = excluded.targetPath, conflict = excluded.conflict
                WHERE entry.kind != excluded.kind OR entry.size != excluded.size OR entry.mtime != excluded.mtime
                  OR entry.ref != excluded.ref OR entry.targetPath IS NOT excluded.targetPath
                  OR (?8 IS NOT NULL AND entry.tags != ?8)
                RETURNING rowid
                """)
            for r in upserts {
                // The rowid of a row inserted or changed (none when nothing changed): the names
                // in memory get it (a changed row's name is the same; the copy is harmless).
                let fold = QueryParser.fold(r.name)
                if let id = try Int64.fetchOne(upsert, arguments: [r.root, r.path, r.name, fold, r.kind, r.size, r.mtime, r.tags,
                                                                   r.ref, r.targetRoot, r.targetPath,
                                                                   Self.isConflictCopy(r.name)]) {
                    changed.append(QueryKey(root: r.root, path: r.path))
                    if names.isBuilt { written.append((id, fold)) }
                }
            }
            return .commit
        } }
        if names.append(written) { try? rebuildNames() }
        return changed
    }

    /// Whether `name` is a conflict's copy (holds `SyncDecision.conflictMark`). A byte search: the
    /// generic `firstRange(of:)` was 8 % of the query thread's time during 20,000 creates.
    static func isConflictCopy(_ name: String) -> Bool {
        var name = name
        return name.withUTF8 { n in
            conflictMark.withUnsafeBufferPointer { m in
                dd_contains(n.baseAddress, n.count, m.baseAddress, m.count) != 0
            }
        }
    }

    private static let conflictMark = Array(SyncDecision.conflictMark.utf8)

    /// Reads every row's folded name into memory (after a walk; when the stale copies pile up).
    public func rebuildNames() throws {
        var e = QueryNames.Entries()
        try database.read { db in
            let cursor = try Row.fetchCursor(db, sql: "SELECT rowid, fold FROM entry")
            while let row = try cursor.next() { e.append(id: row[0], fold: row[1]) }
        }
        e.rowsAtBuild = e.ids.count
        names.replace(e)
    }

    /// Every path of a root that `keep` refuses (for the reconcile walk: the rows gone from disk).
    func paths(root: String, notIn keep: (String) -> Bool) throws -> [String] {
        try database.read { db in
            var out = [String]()
            let rows = try String.fetchCursor(db, sql: "SELECT path FROM entry WHERE root = ?", arguments: [root])
            while let p = try rows.next() {
                if !keep(p) { out.append(p) }
            }
            return out
        }
    }

    /// Gives back the page cache's memory (after a walk: its pages are not needed again soon).
    func releaseMemory() {
        database.releaseMemory()
    }

    /// Roots in the database (a root no longer in the config is dropped by the reconcile).
    func roots() throws -> [String] {
        try database.read { db in try String.fetchAll(db, sql: "SELECT DISTINCT root FROM entry") }
    }

    // MARK: reading

    /// Runs a query; `within` restricts it to these keys (the live queries' re-check).
    public func search(_ node: QueryNode, scopes: [QueryScope], sort: QuerySort? = nil, descending: Bool = false,
                       limit: Int? = nil, within: [QueryKey]? = nil) throws(DriveError) -> [QueryHit] {
        let rowids = within == nil ? nameCandidates(node) : nil
        if rowids?.isEmpty == true { return [] }
        var args = [DatabaseValueConvertible?]()
        // With the rows named (by the names in memory, or `within`), a name is checked on each.
        let whereExpr = sql(node, &args, scanNames: rowids == nil && within == nil)
        let scope = scopeSQL(scopes, &args)
        var q = "SELECT root, path, name, kind, size, mtime, ref FROM entry WHERE (\(whereExpr)) AND (\(scope))"
        if let rowids { q += Self.rowidFilter(rowids) }
        if let within {
            if within.isEmpty { return [] }
            q += " AND (root, path) IN (VALUES " + within.map { _ in "(?, ?)" }.joined(separator: ", ") + ")"
            for k in within { args += [k.root, k.path] }
        }
        switch sort {
        case .name?: q += " ORDER BY fold \(descending ? "DESC" : "ASC"), root, path"
        case .size?: q += " ORDER BY size \(descending ? "DESC" : "ASC"), fold"
        case .modified?: q += " ORDER BY mtime \(descending ? "DESC" : "ASC"), fold"
        case nil: break
        }
        if let limit { q += " LIMIT \(max(0, limit))" }
        do {
            // A cursor, not fetchAll: 100,000 rows copied into Row objects first took 20 MB more.
            return try database.read { db in
                var hits = [QueryHit]()
                let rows = try Row.fetchCursor(db, sql: q, arguments: StatementArguments(args as [Any])!)
                while let row = try rows.next() {
                    hits.append(QueryHit(root: row[0], path: row[1], name: row[2], kind: row[3], size: row[4], mtime: row[5],
                                         external: row[6]))
                }
                return hits
            }
        } catch {
            throw DriveError(.index, "The query index cannot be read: \(error).", underlying: error)
        }
    }

    /// How many items match (`--count`), counted by SQLite.
    public func count(_ node: QueryNode, scopes: [QueryScope]) throws(DriveError) -> Int {
        let rowids = nameCandidates(node)
        if rowids?.isEmpty == true { return 0 }
        var args = [DatabaseValueConvertible?]()
        let whereExpr = sql(node, &args, scanNames: rowids == nil)
        let scope = scopeSQL(scopes, &args)
        let filter = rowids.map(Self.rowidFilter) ?? ""
        do {
            return try database.read { db in
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM entry WHERE (\(whereExpr)) AND (\(scope))\(filter)",
                                 arguments: StatementArguments(args as [Any])!) ?? 0
            }
        } catch {
            throw DriveError(.index, "The query index cannot be read: \(error).", underlying: error)
        }
    }

    public func count() throws -> Int {
        try database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM entry") ?? 0 }
    }

    /// The rows whose names contain a word the expression requires, from the names in memory;
    /// nil when it requires none, or they are not built, or the rows are too many to name.
    public func nameCandidates(_ node: QueryNode) -> [Int64]? {
        guard let word = Self.requiredWord(node) else { return nil }
        return names.candidates(word)
    }

    /// Drops the names in memory: queries scan in SQL until the next rebuild (tests compare).
    public func clearNames() { names.clear() }

    /// A word every match's name contains: a bare word (or a `name:` without wildcards), alone or
    /// in an AND; the longest of several (the fewest rows, most likely).
    static func requiredWord(_ node: QueryNode) -> String? {
        switch node {
        case .term(.word(let w)): return w.isEmpty ? nil : w
        case .term(.nameGlob(let g)): return g.isEmpty || g.contains(where: { "*?[".contains($0) }) ? nil : g
        case .and(let parts): return parts.compactMap(requiredWord).max { $0.utf8.count < $1.utf8.count }
        default: return nil
        }
    }

    /// " AND rowid IN (...)", the rowids written out (integers).
    static func rowidFilter(_ rowids: [Int64]) -> String {
        " AND rowid IN (" + rowids.map(String.init).joined(separator: ",") + ")"
    }

    /// The expression as SQL over `entry`, its values appended to `args`. `scanNames`: a
    /// condition on the name scans the names' index (else it is checked on each row the rest
    /// of the query reaches).
    func sql(_ node: QueryNode, _ args: inout [DatabaseValueConvertible?], scanNames: Bool = true) -> String {
        switch node {
        case .all: return "1"
        case .and(let parts): return parts.map { "(" + sql($0, &args, scanNames: scanNames) + ")" }.joined(separator: " AND ")
        case .or(let parts): return parts.map { "(" + sql($0, &args, scanNames: scanNames) + ")" }.joined(separator: " OR ")
        case .not(let inner): return "NOT (" + sql(inner, &args, scanNames: scanNames) + ")"
        case .term(let t): return sql(t, &args, scanNames: scanNames)
        }
    }

    private func sql(_ t: QueryTerm, _ args: inout [DatabaseValueConvertible?], scanNames: Bool) -> String {
        func byName(_ condition: String) -> String { scanNames ? Self.byName(condition) : condition }
        switch t {
        case .word(let w):
            args.append(w)
            return byName("instr(fold, ?) > 0")
        case .nameGlob(let g):
            if g.contains(where: { "*?[".contains($0) }) {
                args.append(g)
                return byName("fold GLOB ?")
            }
            args.append(g)
            return byName("instr(fold, ?) > 0")
        case .kind(let kinds):
            let stored = Array(Set(kinds.flatMap(QueryKinds.stored(for:)))).sorted()
            args += stored.map { $0 as DatabaseValueConvertible? }
            return "kind IN (" + stored.map { _ in "?" }.joined(separator: ", ") + ")"
        case let .size(lo, hi):
            var parts = ["kind != 'folder'"]
            if let lo { args.append(lo); parts.append("size >= ?") }
            if let hi { args.append(hi); parts.append("size <= ?") }
            return parts.joined(separator: " AND ")
        case let .modified(from, until):
            var parts = [String]()
            if let from { args.append(from); parts.append("mtime >= ?") }
            if let until { args.append(until); parts.append("mtime < ?") }
            return parts.isEmpty ? "1" : parts.joined(separator: " AND ")
        case .status(let states):
            return "(" + states.map { statusSQL($0) }.joined(separator: " OR ") + ")"
        case .tag(let tag):
            args.append("," + tag + ",")
            return "instr(tags, ?) > 0"
        case .app(let id):
            args += RootKey.appRange(id)
            return "(root >= ? AND root < ?)"
        case .store(let name):
            args.append(RootKey.store(name).description)
            return "root = ?"
        case .external:
            return "ref = 1"
        }
    }

    /// A condition on the folded name, evaluated over the names' index (see migration v4).
    static func byName(_ condition: String) -> String {
        "rowid IN (SELECT rowid FROM entry INDEXED BY entry_fold WHERE \(condition))"
    }

    private func statusSQL(_ s: QueryStatus) -> String {
        let upload = "SELECT state FROM idx.upload u WHERE u.root = entry.root AND u.path = entry.path"
        switch s {
        case .conflict: return "conflict = 1"
        case .placeholder: return "0"  // no placeholders yet: every store item is in its cache
        case .pending, .uploading, .failed:
            guard hasItemIndex else { return "0" }
            return "(root LIKE 'store:%' AND kind != 'folder' AND (\(upload)) = '\(s.rawValue)')"
        case .synced:
            guard hasItemIndex else { return "(root LIKE 'store:%' AND kind != 'folder')" }
            return "(root LIKE 'store:%' AND kind != 'folder' AND coalesce((\(upload)), 'synced') = 'synced')"
        }
    }

    private func scopeSQL(_ scopes: [QueryScope], _ args: inout [DatabaseValueConvertible?]) -> String {
        if scopes.isEmpty { return scopeSQL([.documents], &args) }
        return scopes.map { s -> String in
            switch s {
            case .documents: return "(root LIKE 'store:%' OR (root LIKE 'app:%' AND root LIKE '%:Documents'))"
            case .data: return "(root LIKE 'app:%' AND root LIKE '%:Data')"
            case .external:
                return "(ref = 1 OR EXISTS (SELECT 1 FROM entry r WHERE r.ref = 1 AND r.targetRoot = entry.root AND r.targetPath = entry.path))"
            case .app(let id):
                args += RootKey.appRange(id)
                return "(root >= ? AND root < ?)"
            case let .folder(root, prefix):
                if prefix.isEmpty {
                    args.append(root)
                    return "(root = ?)"
                }
                // The items inside the folder, not the folder itself.
                args += [root, prefix + "/", prefix + "0"]
                return "(root = ? AND path >= ? AND path < ?)"
            }
        }.map { "(" + $0 + ")" }.joined(separator: " OR ")
    }
}
