// QueryService: `docdrive query` inside the daemon: one answer, or a stream of changes for
// `--watch`, on a control socket connection.
import CDocDriveSys
import DocDriveWire
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

public final class QueryService: Sendable {
    public let engine: QueryEngine
    /// Where the drive is mounted: the command's fast path learns it from the answer.
    let mountpoint: String

    public init(engine: QueryEngine, mountpoint: String = "") {
        self.engine = engine
        self.mountpoint = mountpoint
    }

    /// The request's expression, scopes, order and limit.
    struct Request {
        var node: QueryNode
        var scopes: [QueryScope]
        var sort: QuerySort?
        var descending: Bool
        var limit: Int?
    }

    func parse(_ r: ControlRequest.Query) throws(DriveError) -> Request {
        if QueryEngine.isDisabled {
            throw DriveError(.unsupported, "The query index is off in this mount (its daemon runs with DOCDRIVE_QUERY_INDEX=off).")
        }
        let node = try QueryParser().parse(r.expr)
        var scopes = [QueryScope]()
        for s in r.scopes { scopes.append(try scope(s)) }
        if let limit = r.limit, limit < 0 { throw DriveError(.invalidName, "The limit must be 0 or more.") }
        return Request(node: node, scopes: scopes, sort: r.sort, descending: r.descending ?? (r.sort == .size || r.sort == .modified), limit: r.limit)
    }

    /// A scope as the user wrote it: documents, data, external, a store, an app id, or a folder
    /// of the mount (mount-relative, "folder:" when the command made it from a path).
    func scope(_ s: String) throws(DriveError) -> QueryScope {
        let c = engine.currentConfig
        if s.hasPrefix("folder:") {
            let rel = String(s.dropFirst(7))
            if let f = engine.folderScope(rel) { return f }
            throw DriveError(.invalidName, "The scope \"\(rel)\" is not a folder of the drive.")
        }
        switch s {
        case "documents": return .documents
        case "data": return .data
        case "external": return .external
        default: break
        }
        if let store = c.stores.first(where: { $0.name == s }) { return .folder(root: store.rootKey, prefix: "") }
        if c.apps.contains(where: { $0.id == s }) { return .app(s) }
        if let f = engine.folderScope(s) { return f }
        throw DriveError(.invalidName, "The scope \"\(s)\" is none of documents, data, external, a store, an app id or a folder of the drive.")
    }

    func describe(_ h: QueryHit) -> QueryItem {
        QueryItem(path: engine.displayPath(h.key), name: h.name, kind: h.kind, size: h.size, modified: h.mtime,
                  external: h.external ? true : nil,
                  store: RootKey(h.root)?.storeName,
                  app: RootKey(h.root)?.appID)
    }

    /// One query, one answer: its items, their paths, or their count.
    public func answer(_ r: ControlRequest.Query) throws(DriveError) -> QueryAnswer {
        let q = try parse(r)
        engine.waitUntilReady(timeout: 60)  // the first walk, at mount
        if r.count {
            let n = try engine.index.count(q.node, scopes: q.scopes)
            return QueryAnswer(count: q.limit.map { min($0, n) } ?? n)
        }
        let hits = try engine.index.search(q.node, scopes: q.scopes, sort: q.sort, descending: q.descending, limit: q.limit)
        // A large answer's memory (tens of MB for 100,000 paths) goes back once it is sent,
        // instead of staying in this thread's malloc arena for the daemon's life.
        if hits.count >= 10_000 { DispatchQueue.global().asyncAfter(deadline: .now() + 1) { trimMalloc() } }
        // Plain output needs the paths only (a thousand items cost more than the search).
        if r.pathsOnly { return QueryAnswer(paths: hits.map { engine.displayPath($0.key) }) }
        return QueryAnswer(items: hits.map(describe))
    }

    /// `query` on its connection: one JSON answer, or the fast path's (`raw`).
    public func answer(_ r: ControlRequest.Query, on connection: ControlConnection) {
        guard r.raw else {
            connection.answer { () throws(DriveError) in try answer(r) }
            return
        }
        var request = r
        request.pathsOnly = true
        let result: QueryAnswer
        do throws(DriveError) {
            result = try answer(request)
        } catch {
            connection.send(error)
            return
        }
        connection.send(raw(result))
    }

    /// The answer to the `docdrive` front's fast path (QueryWire.rawAnswer, which it reads without
    /// Foundation): "=" and the protocol version, the mount point, then the count or every
    /// mount-relative path, each ended by NUL. An error is the usual JSON line (the front then
    /// hands the command to the full program, which asks again and reports it).
    func raw(_ result: QueryAnswer) -> Data {
        Data(QueryWire.rawAnswer(mountpoint: mountpoint, count: result.count, paths: result.paths ?? []))
    }

    /// query-watch: the current results, then one line per batch of changes until the command goes.
    public func watch(_ r: ControlRequest.Query, on connection: ControlConnection) {
        let lines = Mutex<[Data]>([])
        let wake = DispatchSemaphore(value: 0)
        let id: Int
        let hits: [QueryHit]
        do throws(DriveError) {
            let q = try parse(r)
            (id, hits) = try engine.watch(q.node, scopes: q.scopes, sort: q.sort, descending: q.descending, limit: q.limit) { [self] changes in
                let items = changes.map { c in
                    var item = c.hit.map(describe) ?? QueryItem(path: engine.displayPath(c.key))
                    item.event = c.mark
                    return item
                }
                let line = ControlAnswer.ok(QueryAnswer(items: items)).line()
                lines.withLock { $0.append(line) }
                wake.signal()
            }
        } catch {
            connection.send(error)
            return
        }
        defer { engine.unwatch(id) }
        guard connection.send(ControlAnswer.ok(QueryAnswer(items: hits.map(describe)))) else { return }
        while true {
            _ = wake.wait(timeout: .now() + .milliseconds(500))
            let batch = lines.withLock { l -> Data in
                defer { l.removeAll() }
                return l.reduce(into: Data()) { $0.append($1) }
            }
            if !batch.isEmpty && !connection.send(batch) { return }
            // The command went away (interrupted): its end of the socket is closed.
            if connection.isClosed { return }
        }
    }
}
