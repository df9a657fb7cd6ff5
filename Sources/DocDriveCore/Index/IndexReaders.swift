// IndexReaders: read-only connections to the index, lent one at a time under a plain mutex.
//
// GRDB's DatabasePool lends its readers through two dispatch barriers and a semaphore per read.
// Four upload workers that each read the index a few times per file had a third of their
// samples in `_dispatch_sync_f_slow`, mostly these reads: asleep in the barriers, waking one
// another (perf, 10,000 small files, README "Reads that do not queue"). Here a read takes a
// connection off a list under a mutex held for a pop, runs on the calling thread (the
// connection's own queue is never contended: one thread at a time has it), and puts it back.
// Each read is its own transaction, as with the pool; a read of one statement
// (`readStatement`) is the statement's own, without a BEGIN and a COMMIT around it.
import Foundation
import GRDB
import Synchronization

final class IndexReaders: Sendable {
    private let path: String
    private let configuration: Configuration
    /// Connections not in use. Lock: leaf.
    private let idle = Mutex<[DatabaseQueue]>([])
    /// Connections made, at most `limit`; past it, a read goes to `fallback` (the pool).
    private let made = Atomic<Int>(0)
    private let limit: Int
    private let fallback: DatabasePool

    init(pool: DatabasePool, limit: Int = 4) {
        path = pool.path
        var config = Configuration()
        config.readonly = true
        // A reader meets SQLITE_BUSY only in WAL's rare cases (a checkpoint's recovery, the
        // last connection closing); as the pool's readers do, it waits for them.
        config.busyMode = .timeout(10)
        configuration = config
        self.limit = limit
        fallback = pool
    }

    /// Runs `body` in a read transaction of its own.
    func read<T>(_ body: (Database) throws -> T) throws -> T {
        guard let reader = try take() else { return try fallback.read(body) }
        defer { idle.withLock { $0.append(reader) } }
        return try reader.read(body)
    }

    /// Runs `body`, which must run one statement, as that statement's own transaction
    /// (SQLite's autocommit; a single statement reads one snapshot either way). GRDB's `read`
    /// puts a BEGIN and a COMMIT around it, each compiled anew: per uploaded file (a few
    /// such reads) that was as much work as the reads themselves.
    func readStatement<T>(_ body: (Database) throws -> T) throws -> T {
        guard let reader = try take() else { return try fallback.read(body) }
        defer { idle.withLock { $0.append(reader) } }
        return try reader.unsafeRead(body)
    }

    private func take() throws -> DatabaseQueue? {
        if let r = idle.withLock({ $0.popLast() }) { return r }
        // (Two threads may both pass the check; `made` keeps the count right all the same.)
        guard made.add(1, ordering: .relaxed).newValue <= limit else {
            made.subtract(1, ordering: .relaxed)
            return nil
        }
        do {
            return try DatabaseQueue(path: path, configuration: configuration)
        } catch {
            made.subtract(1, ordering: .relaxed)
            throw error
        }
    }
}
