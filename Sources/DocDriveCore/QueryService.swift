// QueryService: `docdrive query` inside the daemon (one answer, or a stream of changes for
// `--watch`) and the command's side of the stream, over the control socket.
import CDocDriveSys
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

    func parse(_ r: [String: Any]) throws(DriveError) -> Request {
        if QueryEngine.isDisabled {
            throw DriveError(.unsupported, "The query index is off in this mount (its daemon runs with DOCDRIVE_QUERY_INDEX=off).")
        }
        let words = r["expr"] as? [String] ?? []
        let node = try QueryParser().parse(words)
        var scopes = [QueryScope]()
        for s in r["in"] as? [String] ?? [] { scopes.append(try scope(s)) }
        var sort: QuerySort?
        if let s = r["sort"] as? String {
            guard let q = QuerySort(rawValue: s) else { throw DriveError(.invalidName, "Sort by name, size or modified, not \"\(s)\".") }
            sort = q
        }
        let limit = r["limit"] as? Int
        if let limit, limit < 0 { throw DriveError(.invalidName, "The limit must be 0 or more.") }
        return Request(node: node, scopes: scopes, sort: sort, descending: r["descending"] as? Bool ?? (sort == .size || sort == .modified), limit: limit)
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

    func describe(_ h: QueryHit) -> [String: Any] {
        var d: [String: Any] = ["path": engine.displayPath(h.key), "name": h.name, "kind": h.kind, "size": h.size,
                                "modified": h.mtime]
        if h.external { d["external"] = true }
        if h.root.hasPrefix("store:") { d["store"] = String(h.root.dropFirst(6)) }
        if h.root.hasPrefix("app:") { d["app"] = String(h.root.split(separator: ":")[1]) }  // String: a statically linked build could not make JSON of a Substring
        return d
    }

    /// One query, one answer: {"items": [...]} or {"count": N}.
    public func handle(_ r: [String: Any]) -> [String: Any] {
        do throws(DriveError) {
            let q = try parse(r)
            engine.waitUntilReady(timeout: 60)  // the first walk, at mount
            if r["count"] as? Bool == true {
                let n = try engine.index.count(q.node, scopes: q.scopes)
                return ["ok": true, "result": ["count": q.limit.map { min($0, n) } ?? n]]
            }
            let hits = try engine.index.search(q.node, scopes: q.scopes, sort: q.sort, descending: q.descending, limit: q.limit)
            // A large answer's memory (tens of MB for 100,000 paths) goes back once it is sent,
            // instead of staying in this thread's malloc arena for the daemon's life.
            if hits.count >= 10_000 { DispatchQueue.global().asyncAfter(deadline: .now() + 1) { trimMalloc() } }
            // Plain output needs the paths only (a thousand dictionaries cost more than the search).
            if r["pathsOnly"] as? Bool == true { return ["ok": true, "result": ["paths": hits.map { engine.displayPath($0.key) }]] }
            return ["ok": true, "result": ["items": hits.map(describe)]]
        } catch {
            return ["ok": false, "code": error.code.description, "error": error.message]
        }
    }

    /// `--watch`: the current results, then one line per change until the command goes.
    /// Returns false when the request is not a live query (the control server answers it).
    public func stream(_ r: [String: Any], _ fd: Int32) -> Bool {
        if r["command"] as? String == "query", r["raw"] as? Bool == true {
            answerRaw(r, fd)
            return true
        }
        guard r["command"] as? String == "query-watch" else { return false }
        let lines = Mutex<[Data]>([])
        let wake = DispatchSemaphore(value: 0)
        let q: Request
        do throws(DriveError) {
            q = try parse(r)
        } catch {
            Self.send(fd, ["ok": false, "code": error.code.description, "error": error.message])
            return true
        }
        let id: Int
        let hits: [QueryHit]
        do throws(DriveError) {
            (id, hits) = try engine.watch(q.node, scopes: q.scopes, sort: q.sort, descending: q.descending, limit: q.limit) { [self] changes in
                let out = changes.map { c -> [String: Any] in
                    var d = c.hit.map(describe) ?? ["path": engine.displayPath(c.key)]
                    d["event"] = c.mark
                    return d
                }
                let encoded = out.compactMap { Self.encode($0) }
                lines.withLock { $0 += encoded }
                wake.signal()
            }
        } catch {
            Self.send(fd, ["ok": false, "code": error.code.description, "error": error.message])
            return true
        }
        defer { engine.unwatch(id) }
        guard Self.send(fd, ["ok": true, "result": ["items": hits.map(describe)]]) else { return true }
        while true {
            _ = wake.wait(timeout: .now() + .milliseconds(500))
            let batch = lines.withLock { l -> Data in
                defer { l.removeAll() }
                return l.reduce(into: Data()) { $0.append($1) }
            }
            if !batch.isEmpty && !Self.send(fd, batch) { return true }
            // The command went away (interrupted): its end of the socket is closed.
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&p, 1, 0) > 0 {
                var b = [UInt8](repeating: 0, count: 256)
                let n = recv(fd, &b, b.count, Int32(MSG_DONTWAIT))
                if n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) { return true }
            }
        }
    }

    /// The answer to the command's fast path (`QueryFastPath`, which reads it without Foundation):
    /// "=", the mount point, then the count or every mount-relative path, each ended by NUL. An
    /// error is the usual JSON line (the command then asks again the usual way, and reports it).
    func answerRaw(_ r: [String: Any], _ fd: Int32) {
        var request = r
        request["pathsOnly"] = true
        let answer = handle(request)
        guard answer["ok"] as? Bool == true, let result = answer["result"] as? [String: Any] else {
            Self.send(fd, answer)
            return
        }
        var out = Data("=".utf8)
        out.append(contentsOf: mountpoint.utf8)
        out.append(0)
        if let n = result["count"] as? Int {
            out.append(contentsOf: String(n).utf8)
            out.append(0)
        }
        for p in result["paths"] as? [String] ?? [] {
            out.append(contentsOf: p.utf8)
            out.append(0)
        }
        Self.send(fd, out)
    }

    static func encode(_ obj: [String: Any]) -> Data? {
        guard var data = try? JSONSerialization.data(withJSONObject: obj, options: [.sortedKeys, .withoutEscapingSlashes]) else { return nil }
        data.append(0x0A)
        return data
    }

    @discardableResult
    static func send(_ fd: Int32, _ obj: [String: Any]) -> Bool {
        guard let data = encode(obj) else { return false }
        return send(fd, data)
    }

    static func send(_ fd: Int32, _ data: Data) -> Bool {
        data.withUnsafeBytes { p -> Bool in
            var done = 0
            while done < p.count {
                let w = Glibc.send(fd, p.baseAddress! + done, p.count - done, Int32(MSG_NOSIGNAL))
                if w < 0 && errno == EINTR { continue }
                if w <= 0 { return false }
                done += w
            }
            return true
        }
    }
}

extension ControlClient {
    /// Sends one request and hands each answer line to `line` until it returns false or the
    /// daemon closes the connection (a live query).
    public static func stream(_ home: DriveHome, _ request: [String: Any], _ line: ([String: Any]) throws -> Bool) throws {
        let s = try send(home, request, timeout: 0)
        defer { close(s) }
        var pending = Data()
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(s, &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw DriveError.io("The daemon did not answer", .init(rawValue: errno)) }
            if n == 0 { return }
            pending.append(contentsOf: buf[0..<n])
            while let nl = pending.firstIndex(of: 0x0A) {
                let lineData = pending[pending.startIndex..<nl]
                pending = Data(pending[(nl + 1)...])
                guard let obj = (try? JSONSerialization.jsonObject(with: lineData)) as? [String: Any] else {
                    throw DriveError(.io, "The daemon's answer could not be read (did it stop?).")
                }
                if obj["ok"] as? Bool == false {
                    throw DriveError(DriveError.Code(named: obj["code"] as? String ?? ""), obj["error"] as? String ?? "The daemon refused the request.")
                }
                if try !line(obj) { return }
            }
        }
    }
}
