// UploadQueue: the durable queue of files to upload, in the index (survives restarts and kill -9),
// with coalescing, a generation per entry (a file changed during its upload goes again) and back-off.
import Foundation
import GRDB
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One file waiting for (or in) an upload.
public struct UploadJob: Equatable, Sendable {
    public var root: String
    public var path: StorePath
    /// Bumped by every enqueue: a job finished under an older generation is not "synced".
    public var generation: Int64
    public var attempts: Int
}

public enum UploadState: String, Sendable, CaseIterable {
    case pending, uploading, synced, failed
}

/// Wakes idle upload workers when the queue may hold new due work, so that they sleep until
/// then instead of polling the database.
final class WorkSignal: @unchecked Sendable {
    private let condition = NSCondition()
    /// Bumped by every signal. Guarded by `condition`.
    private var version = 0

    /// Taken before looking for work: a signal after it makes `wait` return at once.
    func ticket() -> Int {
        condition.lock()
        defer { condition.unlock() }
        return version
    }

    func signal() {
        condition.lock()
        version &+= 1
        condition.broadcast()
        condition.unlock()
    }

    /// Sleeps until a signal newer than `ticket`, or `deadline`.
    func wait(after ticket: Int, until deadline: Date) {
        condition.lock()
        defer { condition.unlock() }
        while version == ticket && condition.wait(until: deadline) {}
    }
}

/// A path is kept in the queue's `path` column in one canonical form: TEXT when its bytes are
/// valid UTF-8 (nearly always, and what older queues hold), else a BLOB of the bytes. Both sides
/// of every comparison go through this form, so a name that is not UTF-8 is stored, found and
/// handed back byte for byte (SQLite keeps a BLOB in a TEXT column as it is, and a BLOB never
/// equals a TEXT: no two forms of one path can meet). No migration is needed.
extension StorePath: DatabaseValueConvertible {
    public var databaseValue: DatabaseValue {
        if let s = string { return s.databaseValue }
        return Data(bytes).databaseValue
    }

    public static func fromDatabaseValue(_ dbValue: DatabaseValue) -> StorePath? {
        switch dbValue.storage {
        case .string(let s): return StorePath(s)
        case .blob(let d): return StorePath(bytes: [UInt8](d))
        default: return nil
        }
    }
}

/// The queue lives in the index database. Every method is one transaction.
public final class UploadQueue: Sendable {
    private let pool: DatabasePool
    private let readers: IndexReaders
    /// Signalled after every change that can make an entry due sooner.
    let work = WorkSignal()
    /// Retries double from `baseDelay` up to `maxDelay`; after `failAfter` attempts the entry
    /// shows as failed (with its error) but is still retried at the capped delay.
    public let baseDelay: Double
    public let maxDelay: Double
    public let failAfter: Int

    init(pool: DatabasePool, readers: IndexReaders, baseDelay: Double = 1, maxDelay: Double = 300, failAfter: Int = 3) {
        self.pool = pool
        self.readers = readers
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.failAfter = failAfter
    }

    static func migrate(_ m: inout DatabaseMigrator) {
        m.registerMigration("v2 uploads") { db in
            try db.create(table: "upload") { t in
                t.column("root", .text).notNull()
                t.column("path", .text).notNull()
                t.column("state", .text).notNull()
                t.column("generation", .integer).notNull()
                t.column("attempts", .integer).notNull()
                t.column("error", .text)
                t.column("due", .double).notNull()
                t.column("updated", .double).notNull()
                t.primaryKey(["root", "path"])
            }
            try db.create(index: "upload_due", on: "upload", columns: ["state", "due"])
        }
    }

    /// The last write that failed (a full disk under the drive home), until one works again.
    /// Lock: leaf.
    private let lastWriteError = Mutex<String?>(nil)
    public var writeError: String? { lastWriteError.withLock { $0 } }

    /// Raised by every write that worked: the counts `docdrive status --watch` shows changed.
    public let statusChanges = StatusChanges()

    /// Endings of claimed entries that could not be recorded (the index could not be written:
    /// a full disk under the drive home). The rule of `uploading`: an entry is in that state
    /// only while a worker holds its claim or while its ending waits here. Every later write of
    /// the queue records these first, in its own transaction, so that each entry ends as it did
    /// (an upload that reached the remote synced, one that failed pending with its back-off)
    /// as soon as the index can be written again, and before a later save of the same path is
    /// queued after it; an idle worker's `claim` writes them too. Taken whole by the writer
    /// that records them (no ending is recorded twice) and put back when that write fails.
    /// Lock: leaf.
    private let unrecorded = Mutex<[(job: UploadJob, ending: Ending, at: Double)]>([])

    /// How many claimed entries wait for their ending to be recorded (see `unrecorded`).
    public var unrecordedCount: Int { unrecorded.withLock { $0.count } }

    private func write<T>(_ body: (Database) throws -> T) throws(DriveError) -> T {
        let owed = unrecorded.withLock { u -> [(job: UploadJob, ending: Ending, at: Double)] in
            defer { u.removeAll() }
            return u
        }
        do {
            let r = try pool.write { db in
                for o in owed { try record(db, o.job, o.ending, now: o.at) }
                return try body(db)
            }
            lastWriteError.withLock { if $0 != nil { $0 = nil } }
            statusChanges.changed()
            if !owed.isEmpty { work.signal() }
            return r
        } catch {
            if !owed.isEmpty { unrecorded.withLock { $0.insert(contentsOf: owed, at: 0) } }
            lastWriteError.withLock { $0 = "\(error)" }
            throw DriveError(.index, "The upload queue cannot be written: \(error).", underlying: error)
        }
    }

    /// Queues `path` for upload at `due` (a later save pushes the time back: saves coalesce).
    public func enqueue(root: String, path: StorePath, due: Double, now: Double = Date().timeIntervalSince1970) throws(DriveError) {
        try enqueueAll([(root, path, due)], now: now)
    }

    /// Queues many paths in one transaction (the uploader's group commit). `keepingRetries`: a
    /// path whose entry has failed already keeps its attempts, its error and its back-off (a
    /// poll that finds the same difference again: a download that cannot be made here, for
    /// want of room, is not made again at every poll, and its entry reaches `failed` and says
    /// why); any other queueing starts the path afresh.
    public func enqueueAll(_ entries: [(String, StorePath, Double)], now: Double = Date().timeIntervalSince1970,
                           keepingRetries: Bool = false) throws(DriveError) {
        guard !entries.isEmpty else { return }
        try write { db in
            for (root, path, due) in entries { try Self.enqueue(db, root: root, path: path, due: due, now: now, keepingRetries: keepingRetries) }
        }
        work.signal()
    }

    private static func enqueue(_ db: Database, root: String, path: StorePath, due: Double, now: Double, keepingRetries: Bool = false) throws {
        try db.cachedStatement(sql: """
            INSERT INTO upload (root, path, state, generation, attempts, error, due, updated)
            VALUES (?, ?, 'pending', 1, 0, NULL, ?, ?)
            ON CONFLICT(root, path) DO UPDATE SET
              state = CASE WHEN state = 'uploading' THEN 'uploading' ELSE 'pending' END,
              generation = generation + 1, attempts = 0, error = NULL, due = excluded.due, updated = excluded.updated
            """ + (keepingRetries ? " WHERE attempts = 0" : "")).execute(arguments: [root, path, due, now])
    }

    /// Which waiting entries `makeDue` makes due now.
    public enum Waiting: Sendable {
        /// Pending and failed ones (at unmount, to upload what can be uploaded; a remote back).
        case all
        /// Failed ones only (`docdrive sync`'s last try), not the write-back delay of saves.
        case failed
    }

    /// The `which` entries waiting (of the store `root`, or of every store) go now: their
    /// delay or back-off cut short. Returns how many.
    @discardableResult
    public func makeDue(_ which: Waiting, root: String? = nil, now: Double = Date().timeIntervalSince1970) throws(DriveError) -> Int {
        let states = which == .all ? "('pending', 'failed')" : "('failed')"
        let n = try write { db -> Int in
            try db.execute(sql: "UPDATE upload SET due = ? WHERE state IN \(states) AND due > ? AND (? IS NULL OR root = ?)",
                           arguments: [now, now, root, root])
            return db.changesCount
        }
        work.signal()
        return n
    }

    /// What `docdrive sync` waits for: everything pending or uploading, and failed entries
    /// that are due for another try (their remote came back).
    public func waitingCount(now: Double = Date().timeIntervalSince1970) throws(DriveError) -> Int {
        do {
            return try readers.read { db in
                try Int.fetchOne(db, sql: """
                    SELECT COUNT(*) FROM upload WHERE state IN ('pending', 'uploading') OR (state = 'failed' AND due <= ?)
                    """, arguments: [now]) ?? 0
            }
        } catch {
            throw DriveError(.index, "The upload queue cannot be read: \(error).", underlying: error)
        }
    }

    /// What an unmount still waits for: entries being uploaded or ready to be (due now), and
    /// entries put back for a moment without a failure (`Ending.again`: their path was busy
    /// with another sync, their file still open, their remote changed meanwhile), whatever
    /// their due time. An entry that failed (an error is kept) waits for its back-off, which an
    /// unmount does not sit through. (A put-back entry was not counted before: an unmount
    /// could end while its last file waited 0.3 s for a busy path.)
    public func activeCount(now: Double = Date().timeIntervalSince1970) throws(DriveError) -> Int {
        do {
            return try readers.read { db in
                try Int.fetchOne(db, sql: """
                    SELECT COUNT(*) FROM upload WHERE path != '' AND
                      (state = 'uploading' OR (state IN ('pending', 'failed') AND due <= ?)
                       OR (state = 'pending' AND error IS NULL))
                    """, arguments: [now]) ?? 0
            }
        } catch {
            throw DriveError(.index, "The upload queue cannot be read: \(error).", underlying: error)
        }
    }

    /// The paths of `root` in one state.
    public func paths(root: String, state: UploadState) throws(DriveError) -> [StorePath] {
        do {
            return try readers.read { db in
                try StorePath.fetchAll(db, sql: "SELECT path FROM upload WHERE root = ? AND state = ?", arguments: [root, state.rawValue])
            }
        } catch {
            throw DriveError(.index, "The upload queue cannot be read: \(error).", underlying: error)
        }
    }

    /// The paths of `root` still to upload (pending or uploading; not the whole-store entry).
    public func waitingPaths(root: String) throws(DriveError) -> [StorePath] {
        do {
            return try readers.read { db in
                try StorePath.fetchAll(db, sql: "SELECT path FROM upload WHERE root = ? AND state IN ('pending', 'uploading') AND path != ''",
                                    arguments: [root])
            }
        } catch {
            throw DriveError(.index, "The upload queue cannot be read: \(error).", underlying: error)
        }
    }

    /// Bytes still to upload for `root`: the sizes of its local files that are pending or
    /// uploading (a deleted path or a folder counts nothing). One lstat per waiting path, so no
    /// size has to be kept up to date in the queue.
    public func bytesLeft(root: String, cache: String) throws(DriveError) -> Int64 {
        var total: Int64 = 0
        let cfd = open(cache, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard cfd >= 0 else { return 0 }
        defer { close(cfd) }
        for path in try waitingPaths(root: root) {
            guard case .success(let dfd) = Beneath.openFolder(cfd, path.folder.names) else { continue }
            if let st = Beneath.stat(dfd, path.lastName), st.st_mode & S_IFMT == S_IFREG { total += Int64(st.st_size) }
            close(dfd)
        }
        return total
    }

    /// The store's paths that are not synced yet are forgotten (the store left the config;
    /// the comparison at its next start finds whatever still differs).
    public func forgetWaiting(root: String) throws(DriveError) {
        try write { db in
            try db.execute(sql: "DELETE FROM upload WHERE root = ? AND state != 'synced'", arguments: [root])
        }
    }

    /// Files that failed, with their errors (for `docdrive sync`).
    public func failures() throws(DriveError) -> [(root: String, path: StorePath, error: String)] {
        do {
            return try readers.read { db in
                try Row.fetchAll(db, sql: "SELECT root, path, error FROM upload WHERE state = 'failed' ORDER BY root, path")
                    .map { (root: $0["root"], path: $0["path"], error: ($0["error"] as String?) ?? "") }
            }
        } catch {
            throw DriveError(.index, "The upload queue cannot be read: \(error).", underlying: error)
        }
    }

    /// Takes the most overdue entry of `root` and marks it uploading.
    public func claim(root: String, now: Double = Date().timeIntervalSince1970) throws(DriveError) -> UploadJob? {
        try claim(root: root, limit: 1, now: now).first
    }

    /// Takes up to `limit` of the most overdue entries of `root`, most overdue first, and marks
    /// them uploading, in one transaction (a worker uploads them in turn and finishes them
    /// together: see `finish`). `sharedBy` workers take from the same queue: each takes its
    /// share of what is due, so that a few files still go up side by side.
    /// `dueBy`: entries due at or before it are taken (`now` unless a burst holds them back).
    public func claim(root: String, limit: Int, sharedBy workers: Int = 1, dueBy: Double? = nil,
                      now: Double = Date().timeIntervalSince1970) throws(DriveError) -> [UploadJob] {
        let dueBy = dueBy ?? now
        // Idle workers poll: look first in a read transaction, which takes no write lock and
        // lets the index writer and the other workers go on.
        let due: Int
        do {
            due = try readers.read { db in
                try Int.fetchOne(db.cachedStatement(sql: "SELECT COUNT(*) FROM (\(Self.dueSQL))"),
                                 arguments: [root, dueBy, limit * max(1, workers)]) ?? 0
            }
        } catch {
            throw DriveError(.index, "The upload queue cannot be read: \(error).", underlying: error)
        }
        guard due > 0 else {
            if unrecordedCount > 0 { try write { _ in } }
            return []
        }
        let take = min(limit, max(1, due / max(1, workers)))
        return try write { db -> [UploadJob] in
            let jobs = try Row.fetchAll(db.cachedStatement(sql: Self.dueSQL), arguments: [root, dueBy, take]).map {
                UploadJob(root: root, path: $0["path"], generation: $0["generation"], attempts: $0["attempts"])
            }
            let mark = try db.cachedStatement(sql: "UPDATE upload SET state = 'uploading', updated = ? WHERE root = ? AND path = ?")
            for job in jobs { try mark.execute(arguments: [now, root, job.path]) }
            return jobs
        }
    }

    private static let dueSQL = """
        SELECT path, generation, attempts FROM upload
        WHERE root = ? AND state IN ('pending', 'failed') AND due <= ? AND path != '' ORDER BY due LIMIT ?
        """

    /// How a claimed job ended.
    public enum Ending: Equatable, Sendable {
        /// The remote now holds the local state (uploaded, or a folder walked).
        case synced
        /// Gone locally and now from the remote.
        case removed
        /// Not done, not failed: goes again at `due` without using up an attempt (locked for
        /// writing, or changed during its upload).
        case again(due: Double)
        /// Never started (its worker stopped): back to waiting, as it was.
        case unstarted
        /// Failed with this sentence: retried after a back-off.
        case failed(String)
    }

    /// Records how claimed jobs ended, in one transaction. When it cannot be written, the
    /// endings are kept and recorded by the queue's next write that can be (`unrecorded`).
    public func finish(_ endings: [(UploadJob, Ending)], now: Double = Date().timeIntervalSince1970) throws(DriveError) {
        guard !endings.isEmpty else { return }
        do throws(DriveError) {
            try write { db in
                for (job, ending) in endings { try record(db, job, ending, now: now) }
            }
        } catch {
            unrecorded.withLock { $0.append(contentsOf: endings.map { (job: $0.0, ending: $0.1, at: now) }) }
            throw error
        }
        work.signal()
    }

    private func record(_ db: Database, _ job: UploadJob, _ ending: Ending, now: Double) throws {
        switch ending {
        case .synced: try Self.complete(db, job, now: now)
        case .removed: try Self.completeRemoved(db, job, now: now)
        case .again(let due):
            try Self.enqueue(db, root: job.root, path: job.path, due: due, now: now)
            try Self.complete(db, job, now: now)
        case .failed(let message): try fail(db, job, error: message, now: now)
        case .unstarted:
            try db.cachedStatement(sql: "UPDATE upload SET state = 'pending' WHERE root = ? AND path = ? AND state = 'uploading'")
                .execute(arguments: [job.root, job.path])
        }
    }

    /// The upload of `job` reached the remote. If the file was saved again meanwhile, the entry
    /// goes back to pending instead (at its own due time).
    public func complete(_ job: UploadJob, now: Double = Date().timeIntervalSince1970) throws(DriveError) {
        try write { db in try Self.complete(db, job, now: now) }
    }

    private static func complete(_ db: Database, _ job: UploadJob, now: Double) throws {
        try db.cachedStatement(sql: """
            UPDATE upload SET state = CASE WHEN generation = ? THEN 'synced' ELSE 'pending' END,
              error = NULL, attempts = 0, updated = ? WHERE root = ? AND path = ?
            """).execute(arguments: [job.generation, now, job.root, job.path])
    }

    /// The path is gone locally and now from the remote too: the entry goes (unless the path
    /// was saved again meanwhile).
    public func completeRemoved(_ job: UploadJob, now: Double = Date().timeIntervalSince1970) throws(DriveError) {
        try write { db in try Self.completeRemoved(db, job, now: now) }
    }

    private static func completeRemoved(_ db: Database, _ job: UploadJob, now: Double) throws {
        try db.cachedStatement(sql: "DELETE FROM upload WHERE root = ? AND path = ? AND generation = ?")
            .execute(arguments: [job.root, job.path, job.generation])
        try db.cachedStatement(sql: "UPDATE upload SET state = 'pending', updated = ? WHERE root = ? AND path = ? AND state = 'uploading'")
            .execute(arguments: [now, job.root, job.path])
    }

    /// The upload failed: retry after a doubling delay; shown as failed after `failAfter` attempts.
    public func fail(_ job: UploadJob, error: String, now: Double = Date().timeIntervalSince1970) throws(DriveError) {
        try write { db in try fail(db, job, error: error, now: now) }
    }

    private func fail(_ db: Database, _ job: UploadJob, error: String, now: Double) throws {
        let attempts = job.attempts + 1
        let delay = min(maxDelay, baseDelay * pow(2, Double(attempts - 1)))
        let state = attempts >= failAfter ? "failed" : "pending"
        try db.execute(sql: """
            UPDATE upload SET state = CASE WHEN generation = ? THEN ? ELSE 'pending' END,
              attempts = CASE WHEN generation = ? THEN ? ELSE 0 END,
              error = ?, due = MAX(due, ?), updated = ? WHERE root = ? AND path = ?
            """, arguments: [job.generation, state, job.generation, attempts, error, now + delay, now, job.root, job.path])
    }

    /// After a crash or restart nothing is really uploading: those entries go back to pending.
    public func recoverInterrupted() throws(DriveError) {
        try write { db in
            try db.execute(sql: "UPDATE upload SET state = 'pending' WHERE state = 'uploading'")
        }
        work.signal()
    }

    /// When the next entry of `root` is due (nil: nothing waits).
    public func nextDue(root: String) throws(DriveError) -> Double? {
        do {
            return try readers.read { db in
                try Double.fetchOne(db.cachedStatement(sql: """
                    SELECT MIN(due) FROM upload WHERE root = ? AND state IN ('pending', 'failed') AND path != ''
                    """), arguments: [root])
            }
        } catch {
            throw DriveError(.index, "The upload queue cannot be read: \(error).", underlying: error)
        }
    }

    /// Taken by a worker before it looks for work (see `waitForWork`).
    public func workTicket() -> Int { work.ticket() }

    /// Idle workers sleep here: until an enqueue (or another change that can make work due)
    /// after `ticket`, until the next entry of `root` is due, or at most `cap` seconds.
    public func waitForWork(root: String, after ticket: Int, cap: Double) {
        let now = Date().timeIntervalSince1970
        var until = now + cap
        if let due = try? nextDue(root: root) { until = min(until, max(now, due)) }
        work.wait(after: ticket, until: Date(timeIntervalSince1970: until))
    }

    /// The file was renamed locally before its upload: the entry follows it.
    public func rename(root: String, from: StorePath, to: StorePath) throws(DriveError) {
        try write { db in
            try db.execute(sql: "DELETE FROM upload WHERE root = ? AND path = ?", arguments: [root, to])
            try db.execute(sql: "UPDATE upload SET path = ? WHERE root = ? AND path = ?", arguments: [to, root, from])
        }
    }

    /// The file was deleted locally: nothing to upload any more.
    public func remove(root: String, path: StorePath) throws(DriveError) {
        try write { db in
            try db.execute(sql: "DELETE FROM upload WHERE root = ? AND path = ?", arguments: [root, path])
        }
    }

    /// Entries per state, for `docdrive status`.
    public func counts(root: String? = nil) throws(DriveError) -> [UploadState: Int] {
        do {
            return try readers.read { db in
                var r = [UploadState: Int]()
                let rows = try Row.fetchAll(db, sql: "SELECT state, COUNT(*) AS n FROM upload WHERE ? IS NULL OR root = ? GROUP BY state",
                                            arguments: [root, root])
                for row in rows {
                    if let s = UploadState(rawValue: row["state"]) { r[s] = row["n"] }
                }
                return r
            }
        } catch {
            throw DriveError(.index, "The upload queue cannot be read: \(error).", underlying: error)
        }
    }

    /// The state and last error of one file, for the user.docdrive.status xattr.
    public func state(root: String, path: StorePath) throws(DriveError) -> (UploadState, String?)? {
        do {
            return try readers.read { db in
                guard let row = try Row.fetchOne(db, sql: "SELECT state, error FROM upload WHERE root = ? AND path = ?",
                                                 arguments: [root, path]),
                      let s = UploadState(rawValue: row["state"]) else { return nil }
                return (s, row["error"])
            }
        } catch {
            throw DriveError(.index, "The upload queue cannot be read: \(error).", underlying: error)
        }
    }
}
