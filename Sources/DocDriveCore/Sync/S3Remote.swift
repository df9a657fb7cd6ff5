// S3Remote: a store's remote that is a prefix of an S3 bucket (SeaweedFS, MinIO, Ceph RGW,
// AWS): plain objects any S3 tool reads, no lost update through S3's conditional requests.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What S3 holds for a store (see S3Keys for the keys, S3Meta for the metadata):
///  * a file: an object with exactly the file's bytes; a symbolic link: an object whose body
///    is the target, with `x-amz-meta-docdrive-link: 1`; a folder: a zero-byte `path/` marker
///    object, or implied by the keys under it (what other tools make);
///  * `.docdrive-store` under the prefix: the marker `store add` writes; `.docdrive/`: records
///    of this device's unfinished multipart uploads, and probe objects.
/// Versions are ETags (without their quotes). Listings carry no user metadata, so `list()`
/// HEADs each object whose (key, ETag) it has not seen yet, and keeps the answers in memory:
/// a second listing HEADs only what changed. `list(metadata: false)` skips that.
public final class S3Remote: Remote, Sendable {
    public let client: S3Client
    public let keys: S3Keys
    /// Tags this device's multipart upload records (DeviceIdentity.tag).
    public let device: String
    /// Keys per listing page (S3's maximum is 1000; tests make it small to page).
    public let pageSize: Int
    /// HEAD answers by key (its bytes: Strings that are canonically equivalent are equal),
    /// valid while the key's ETag is the same. Lock: leaf.
    private let heads = Mutex<[[UInt8]: Head]>([:])
    /// Whether DELETE honours If-Match here (`probeConditionalWrites` finds out; until then
    /// assumed). Without it a conditional delete HEADs first (a short race remains).
    private let conditionalDelete = Atomic<Bool>(true)

    struct Head: Sendable {
        var etag: String
        var size: Int64
        var meta: RemoteMeta
        var link: Bool
        var upload: String?
    }

    public init(client: S3Client, device: String, pageSize: Int = 1000) {
        self.client = client
        self.keys = S3Keys(prefix: client.settings.prefix)
        self.device = device
        self.pageSize = max(1, min(1000, pageSize))
    }

    /// The remote of a store's settings, with credentials from where `SigV4.Credentials.load`
    /// looks.
    public convenience init(settings: S3Settings, device: String) throws(DriveError) {
        let credentials = try SigV4.Credentials.load(credentialsFile: settings.credentialsFile)
        self.init(client: try S3Client(settings: settings, credentials: credentials), device: device)
    }

    public var displayName: String { client.settings.displayName }

    // MARK: Store set-up

    /// Throws a sentence unless the bucket answers to these credentials.
    public func checkBucket() throws(DriveError) {
        let r = try client.send(.GET, key: nil, query: [("list-type", "2"), ("max-keys", "1"), ("prefix", keys.keyPrefix)])
        guard r.status == 200 else { throw client.failure(r, "list \(displayName)") }
    }

    public func checkReachable() throws(DriveError) {
        let r = try client.send(.HEAD, key: keys.ownKey(S3Keys.markerName))
        if r.status == 200 { return }
        if r.status == 404 {
            // A HEAD has no body: tell a missing bucket from a missing marker.
            try checkBucket()
            throw DriveError(.unreachable, "\(displayName) is not the store's (no \(S3Keys.markerName) in it); add the store with `docdrive store add` first.")
        }
        throw client.failure(r, "reach \(displayName)")
    }

    /// Writes the marker (at `store add`); one that is there already (another device made the
    /// store) is kept: this device joins the store.
    public func writeMarker(store: String) throws(DriveError) {
        let r = try client.send(.PUT, key: keys.ownKey(S3Keys.markerName), headers: [("If-None-Match", "*")],
                                body: .bytes(Array("DocDrive store \(store)\n".utf8)))
        if r.status == 200 || r.status == 412 || r.status == 409 { return }
        throw client.failure(r, "write the store's marker to \(displayName)")
    }

    /// Checks that the server honours conditional writes, without which two devices could
    /// overwrite each other's changes: a probe key written twice with `If-None-Match: *` must
    /// be refused the second time, and a replace with `If-Match` on a wrong ETag too. Also
    /// finds out whether DELETE honours `If-Match` (returned; used from now on).
    @discardableResult
    public func probeConditionalWrites() throws(DriveError) -> S3Capabilities {
        let key = keys.ownKey(S3Keys.ownFolder + "/probe-\(device)-\(Self.randomToken())")
        let body = S3Body.bytes(Array("DocDrive probe\n".utf8))
        defer { _ = try? client.send(.DELETE, key: key) }
        let first = try client.send(.PUT, key: key, headers: [("If-None-Match", "*")], body: body)
        guard first.status == 200 else { throw client.failure(first, "write a probe object to \(displayName)") }
        let second = try client.send(.PUT, key: key, headers: [("If-None-Match", "*")], body: body)
        if second.status == 200 {
            throw DriveError(.unsupported, "The S3 server at \(client.endpointName) ignores If-None-Match: * (it let a create-only write replace an object), so two devices could overwrite each other's changes; DocDrive refuses to use it.")
        }
        guard second.status == 412 || second.status == 409 else { throw client.failure(second, "probe conditional writes on \(displayName)") }
        let replace = try client.send(.PUT, key: key, headers: [("If-Match", "\"00000000000000000000000000000000\"")], body: body)
        if replace.status == 200 {
            throw DriveError(.unsupported, "The S3 server at \(client.endpointName) ignores If-Match (it let a write replace an object of another ETag), so two devices could overwrite each other's changes; DocDrive refuses to use it.")
        }
        let delete = try client.send(.DELETE, key: key, headers: [("If-Match", "\"00000000000000000000000000000000\"")])
        let honoured = delete.status == 412 || delete.status == 409
        conditionalDelete.store(honoured, ordering: .relaxed)
        return S3Capabilities(conditionalDelete: honoured)
    }

    // MARK: Listing

    public func list() throws(DriveError) -> [RemoteItem] { try list(metadata: true) }

    /// Every item of the store. With `metadata`, each file's metadata and kind (file or link)
    /// come from a HEAD unless this (key, ETag) was seen before; without, files are `.file`
    /// with the metadata known so far.
    public func list(metadata: Bool) throws(DriveError) -> [RemoteItem] {
        let objects = try listObjects(keyPrefix: keys.keyPrefix)
        var byPath = [StorePath: RemoteItem]()
        var files = [(key: String, index: StorePath)]()
        for o in objects {
            guard let (path, isFolder) = keys.path(ofKey: o.key) else { continue }
            if isFolder {
                byPath[path] = RemoteItem(path: path, kind: .folder, version: "", size: 0)
            } else if byPath[path]?.kind != .folder {
                var item = RemoteItem(path: path, kind: .file, version: o.etag, size: o.size)
                if let h = cachedHead(o.key, etag: o.etag) {
                    item.meta = h.meta
                    if h.link { item.kind = .symlink }
                } else {
                    files.append((o.key, path))
                }
                byPath[path] = item
            }
            // Folders implied by the keys under them (objects other tools put) are folders too;
            // a folder wins over a file of the same name.
            var folder = path.folder
            while !folder.isEmpty {
                if byPath[folder]?.kind == .folder { break }
                byPath[folder] = RemoteItem(path: folder, kind: .folder, version: "", size: 0)
                folder = folder.folder
            }
        }
        if metadata && !files.isEmpty {
            let found = Locked<[StorePath: Head]>([:])
            let failure = Locked<DriveError?>(nil)
            let wanted = files
            S3Parallel.forEach(wanted.count, width: 16) { i in
                do throws(DriveError) {
                    if let h = try self.head(wanted[i].key) { found.update { $0[wanted[i].index] = h } }
                } catch {
                    failure.update { if $0 == nil { $0 = error } }
                }
            }
            if let e = failure.value { throw e }
            for (path, h) in found.value {
                guard var item = byPath[path], item.kind != .folder else { continue }
                item.version = h.etag
                item.size = h.size
                item.meta = h.meta
                item.kind = h.link ? .symlink : .file
                byPath[path] = item
            }
        }
        return byPath.values.sorted { $0.path < $1.path }
    }

    struct Listed { var key: String; var etag: String; var size: Int64 }

    /// Every object under `keyPrefix`, page by page (ListObjectsV2).
    func listObjects(keyPrefix: String, limit: Int? = nil) throws(DriveError) -> [Listed] {
        var out = [Listed]()
        var token: String?
        repeat {
            var query = [("list-type", "2"), ("prefix", keyPrefix), ("encoding-type", "url"),
                         ("max-keys", String(min(pageSize, limit ?? pageSize)))]
            if let token { query.append(("continuation-token", token)) }
            let r = try client.send(.GET, key: nil, query: query)
            guard r.status == 200 else { throw client.failure(r, "list \(displayName)") }
            let xml = S3XML(r.body)
            let urlEncoded = xml.value("EncodingType") == "url"
            for c in xml.elements("Contents") {
                guard var key = c.value("Key") else { continue }
                if urlEncoded { key = Self.urlDecoded(key) }
                out.append(Listed(key: key, etag: Self.unquoted(c.value("ETag") ?? ""), size: Int64(c.value("Size") ?? "") ?? 0))
            }
            token = xml.value("IsTruncated") == "true" ? xml.value("NextContinuationToken") : nil
            if let limit, out.count >= limit { break }
        } while token != nil
        return out
    }

    public func item(at path: StorePath) throws(DriveError) -> RemoteItem? {
        let key = try keys.key(path)
        if let h = try head(key) {
            return RemoteItem(path: path, kind: h.link ? .symlink : .file, version: h.etag, size: h.size, meta: h.meta)
        }
        if !(try listObjects(keyPrefix: key + "/", limit: 1)).isEmpty {
            var meta = RemoteMeta()
            if let h = try head(key + "/") { meta = h.meta }
            return RemoteItem(path: path, kind: .folder, version: "", size: 0, meta: meta)
        }
        return nil
    }

    /// HEAD of a key: nil when there is no object.
    func head(_ key: String) throws(DriveError) -> Head? {
        let r = try client.send(.HEAD, key: key)
        if r.status == 404 { return nil }
        guard r.status == 200 else { throw client.failure(r, "read the metadata of \(key)") }
        let (meta, link, upload) = S3Meta.meta(r.headerPairs)
        let h = Head(etag: Self.unquoted(r.header("ETag") ?? ""), size: Int64(r.header("Content-Length") ?? "") ?? 0,
                     meta: meta, link: link, upload: upload)
        heads.withLock { $0[Array(key.utf8)] = h }
        return h
    }

    private func cachedHead(_ key: String, etag: String) -> Head? {
        heads.withLock { $0[Array(key.utf8)] }.flatMap { $0.etag == etag ? $0 : nil }
    }

    // MARK: Reading

    public func download(_ path: StorePath, version: String?, to out: Int32,
                         progress: ((Int64, Int64) -> Void)?) throws(DriveError) -> RemoteItem {
        let key = try keys.key(path)
        var written: Int64 = 0
        var pinned = version
        var total: Int64 = -1
        var responseHead: HTTPResponseHead?
        var attempt = 0
        guard ftruncate(out, 0) == 0 else { throw S3Client.describe(.write(errno)) }
        while true {
            var headers = [(String, String)]()
            if let pinned { headers.append(("If-Match", "\"\(pinned)\"")) }
            if written > 0 { headers.append(("Range", "bytes=\(written)-")) }
            let resumeAt = written
            do throws(DriveError) {
                let r = try client.send(.GET, key: key, headers: headers, sink: { head, buffer in
                    if responseHead == nil || (head.status.code == 200 && resumeAt > 0 && written == resumeAt) {
                        // The first bytes of an answer: a 200 to a ranged request starts over.
                        if head.status.code == 200 { written = 0 }
                        responseHead = head
                        if pinned == nil, let etag = head.headers.first(name: "ETag") { pinned = Self.unquoted(etag) }
                        total = Self.totalSize(head)
                    }
                    try buffer.withUnsafeReadableBytes { raw in
                        var off = 0
                        while off < raw.count {
                            let n = pwrite(out, raw.baseAddress! + off, raw.count - off, off_t(written))
                            if n < 0 && errno == EINTR { continue }
                            if n < 0 { throw S3LocalFailure.write(errno) }
                            off += n
                            written += Int64(n)
                        }
                    }
                    progress?(written, total)
                }, retries: false)
                switch r.status {
                case 200, 206:
                    if responseHead == nil { responseHead = HTTPResponseHead(version: .http1_1, status: .ok, headers: r.headers) }
                case 404 where pinned != nil && version == nil:
                    throw DriveError(.remoteChanged, "\(path) changed on \(displayName) during its download.")
                case 404:
                    throw DriveError(.notFound, "There is no \(path) on \(displayName).")
                case 412, 304:
                    throw DriveError(.remoteChanged, "\(path) on \(displayName) is no longer the version asked for (another device changed it).")
                case 416 where written > 0 && written == total:
                    break
                default:
                    throw client.failure(r, "download \(path)")
                }
                break
            } catch where error.code == .unreachable {
                // Broken or refused: wait and go on from the last byte written (a connection
                // that broke after some bytes came starts the count of attempts again).
                attempt = written > resumeAt ? 0 : attempt + 1
                if attempt >= client.retry.attempts { throw error }
                Thread.sleep(forTimeInterval: client.retry.delay(afterAttempt: attempt))
            }
        }
        if total >= 0 && written != total {
            throw DriveError(.io, "The download of \(path) from \(displayName) ended after \(written) of \(total) bytes.")
        }
        guard ftruncate(out, off_t(written)) == 0 else { throw S3Client.describe(.write(errno)) }
        let headers = responseHead.map { Array($0.headers.map { ($0.name, $0.value) }) } ?? []
        let (meta, link, _) = S3Meta.meta(headers)
        let etag = Self.unquoted(responseHead?.headers.first(name: "ETag") ?? pinned ?? "")
        return RemoteItem(path: path, kind: link ? .symlink : .file, version: etag, size: written, meta: meta)
    }

    static func totalSize(_ head: HTTPResponseHead) -> Int64 {
        if let range = head.headers.first(name: "Content-Range"), let slash = range.lastIndex(of: "/") {
            return Int64(range[range.index(after: slash)...]) ?? -1
        }
        return Int64(head.headers.first(name: "Content-Length") ?? "") ?? -1
    }

    // MARK: Writing

    public func upload(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                       limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(DriveError) -> RemoteItem {
        let key = try keys.key(path)
        var st = stat()
        guard fstat(source, &st) == 0 else { throw S3Client.describe(.read(errno)) }
        let size = Int64(st.st_size)
        if size > client.settings.partSize {
            return try uploadMultipart(from: source, size: size, key: key, path: path, expecting: expecting, meta: meta,
                                       limit: limit, progress: progress)
        }
        let token = Self.randomToken()
        var sent: Int64 = 0
        let body = S3Body.file(fd: source, offset: 0, length: size, limit: limit, sent: { n in
            sent += Int64(n)
            progress?(sent, size)
        })
        var retried = false
        let headers = S3Meta.headers(meta, upload: token) + Self.condition(expecting) + [("Content-Type", "application/octet-stream")]
        let r = try client.send(.PUT, key: key, headers: headers, body: body, beforeRetry: { retried = true; sent = 0 })
        return try written(r, key: key, path: path, kind: .file, size: size, meta: meta, token: token, retried: retried,
                           expecting: expecting, what: "upload \(path)")
    }

    /// The item a write made, from its answer; a refused condition is `.remoteChanged`, unless
    /// a retried request finds its own earlier attempt's object there (same upload token).
    func written(_ r: S3Response, key: String, path: StorePath, kind: SyncEntry.Kind, size: Int64, meta: RemoteMeta,
                 token: String?, retried: Bool, expecting: RemoteExpectation, what: String) throws(DriveError) -> RemoteItem {
        switch r.status {
        case 200:
            // A completed multipart upload gives its ETag in the body.
            let etag = Self.unquoted(r.header("ETag") ?? S3XML(r.body).value("ETag") ?? "")
            heads.withLock { $0[Array(key.utf8)] = Head(etag: etag, size: size, meta: meta, link: kind == .symlink, upload: token) }
            return RemoteItem(path: path, kind: kind, version: etag, size: size, meta: meta)
        case 412 where retried && token != nil, 409 where retried && token != nil, 404 where retried && token != nil:
            // An earlier attempt may have succeeded with its answer lost (a retried complete
            // finds its upload gone): the object is ours if it carries this upload's token.
            if let h = try head(key), h.upload == token {
                return RemoteItem(path: path, kind: kind, version: h.etag, size: h.size, meta: h.meta)
            }
            throw client.failure(r, what)
        case 404 where expecting != .absent:
            throw DriveError(.remoteChanged, "Cannot \(what): it was deleted on \(displayName) meanwhile (by another device).")
        default:
            throw client.failure(r, what)
        }
    }

    public func makeFolder(_ path: StorePath, meta: RemoteMeta) throws(DriveError) -> RemoteItem {
        let key = try keys.key(path, folder: true)
        if try head(String(key.dropLast())) != nil {
            throw DriveError(.remoteChanged, "Cannot make the folder \(path): \(displayName) has a file of that name (another device made it).")
        }
        let r = try client.send(.PUT, key: key, headers: S3Meta.headers(meta) + [("If-None-Match", "*")], body: .bytes([]))
        guard r.status == 200 || r.status == 412 || r.status == 409 else { throw client.failure(r, "make the folder \(path)") }
        return RemoteItem(path: path, kind: .folder, version: "", size: 0, meta: meta)
    }

    public func makeSymlink(_ target: [UInt8], at path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta) throws(DriveError) -> RemoteItem {
        let key = try keys.key(path)
        let token = Self.randomToken()
        var retried = false
        let headers = S3Meta.headers(meta, link: true, upload: token) + Self.condition(expecting)
        let r = try client.send(.PUT, key: key, headers: headers, body: .bytes(target), beforeRetry: { retried = true })
        return try written(r, key: key, path: path, kind: .symlink, size: Int64(target.count), meta: meta, token: token,
                           retried: retried, expecting: expecting, what: "make the link \(path)")
    }

    public func delete(_ path: StorePath, version: String) throws(DriveError) {
        if version.isEmpty {
            let key = try keys.key(path, folder: true)
            let inside = try listObjects(keyPrefix: key, limit: 2).filter { !$0.key.utf8.elementsEqual(key.utf8) }
            if !inside.isEmpty {
                throw DriveError(.remoteChanged, "Cannot delete the folder \(path): it is not empty on \(displayName) (another device put something in it).")
            }
            let r = try client.send(.DELETE, key: key)
            guard r.status == 204 || r.status == 200 || r.status == 404 else { throw client.failure(r, "delete the folder \(path)") }
            return
        }
        let key = try keys.key(path)
        try deleteObject(key, etag: version, what: "delete \(path)")
    }

    /// DELETE if the object is still `etag`; gone already is fine.
    func deleteObject(_ key: String, etag: String, what: String) throws(DriveError) {
        if !conditionalDelete.load(ordering: .relaxed) {
            guard let h = try head(key) else { return }
            if h.etag != etag { throw DriveError(.remoteChanged, "Cannot \(what): it changed on \(displayName) meanwhile (another device wrote it).") }
        }
        let r = try client.send(.DELETE, key: key, headers: [("If-Match", "\"\(etag)\"")])
        switch r.status {
        case 200, 204, 404:
            heads.withLock { _ = $0.removeValue(forKey: Array(key.utf8)) }
        case 412 where try head(key) == nil, 409 where try head(key) == nil:
            // If-Match on a key that is gone fails (SeaweedFS): gone already is fine.
            break
        default:
            throw client.failure(r, what)
        }
    }

    public func move(_ from: StorePath, version: String, to: StorePath) throws(DriveError) -> RemoteItem {
        if version.isEmpty {
            let fromKey = try keys.key(from, folder: true)
            let toKey = try keys.key(to, folder: true)
            let objects = try listObjects(keyPrefix: fromKey)
            if objects.isEmpty { throw DriveError(.notFound, "There is no folder \(from) on \(displayName).") }
            // Copy everything first, then delete: a move cut short leaves copies, never a loss.
            for o in objects {
                let rest = String(decoding: o.key.utf8.dropFirst(fromKey.utf8.count), as: UTF8.self)
                try copyObject(o.key, etag: o.etag, size: o.size, to: toKey + rest, what: "move \(from) to \(to)")
            }
            for o in objects {
                try deleteObject(o.key, etag: o.etag, what: "move \(from) to \(to)")
            }
            return RemoteItem(path: to, kind: .folder, version: "", size: 0)
        }
        let fromKey = try keys.key(from)
        let toKey = try keys.key(to)
        guard let source = try head(fromKey) else {
            throw DriveError(.remoteChanged, "Cannot move \(from): it was deleted on \(displayName) meanwhile.")
        }
        if source.etag != version {
            throw DriveError(.remoteChanged, "Cannot move \(from): it changed on \(displayName) meanwhile (another device wrote it).")
        }
        try copyObject(fromKey, etag: version, size: source.size, to: toKey, what: "move \(from) to \(to)")
        try deleteObject(fromKey, etag: version, what: "move \(from) to \(to)")
        guard let h = try head(toKey) else {
            throw DriveError(.remoteChanged, "Moved \(from) to \(to), but another device deleted it there at once.")
        }
        return RemoteItem(path: to, kind: h.link ? .symlink : .file, version: h.etag, size: h.size, meta: h.meta)
    }

    /// Server-side copy of `key` (if still `etag`) to `to`, where nothing may be; metadata
    /// goes along. Objects over 5 GiB are copied in parts.
    func copyObject(_ key: String, etag: String, size: Int64, to: String, what: String) throws(DriveError) {
        let source = "/" + client.settings.bucket + "/" + SigV4.encode(key, slash: false)
        if key.utf8.last == UInt8(ascii: "/") {
            // A folder marker (some servers keep it as a real folder, which no copy takes):
            // made anew, with its metadata.
            let meta = try head(key)?.meta ?? RemoteMeta()
            let r = try client.send(.PUT, key: to, headers: S3Meta.headers(meta) + [("If-None-Match", "*")], body: .bytes([]))
            guard r.status == 200 || r.status == 412 || r.status == 409 else { throw client.failure(r, what) }
            return
        }
        if size > S3Settings.partSizeRange.upperBound {
            return try copyMultipart(source: source, key: key, etag: etag, size: size, to: to, what: what)
        }
        var retried = false
        let r = try client.send(.PUT, key: to, headers: [("x-amz-copy-source", source), ("x-amz-copy-source-if-match", "\"\(etag)\""),
                                                         ("If-None-Match", "*")], beforeRetry: { retried = true })
        if r.status == 200, S3XML(r.body).rootName != "Error" { return }
        // A retried copy whose first attempt landed: the target holds the source's version.
        if retried, r.status == 412 || r.status == 409, let h = try head(to), h.etag == etag { return }
        if r.status == 404 { throw DriveError(.remoteChanged, "Cannot \(what): the source was deleted on \(displayName) meanwhile.") }
        if r.status == 200 { throw client.failure(S3Response(status: 500, headers: r.headers, body: r.body), what) }
        throw client.failure(r, what)
    }

    // MARK: Helpers

    static func condition(_ e: RemoteExpectation) -> [(String, String)] {
        switch e {
        case .absent: return [("If-None-Match", "*")]
        case .version(let v): return [("If-Match", "\"\(v)\"")]
        }
    }

    static func unquoted(_ etag: String) -> String {
        var e = Substring(etag)
        if e.hasPrefix("W/") { e = e.dropFirst(2) }
        if e.hasPrefix("\"") && e.hasSuffix("\"") && e.count >= 2 { e = e.dropFirst().dropLast() }
        return String(e)
    }

    /// The key from a listing with `encoding-type=url` (as botocore reads it: "+" is a space).
    static func urlDecoded(_ s: String) -> String {
        s.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? s
    }

    static func randomToken() -> String {
        var g = SystemRandomNumberGenerator()
        return Hex.encode((0..<8).map { _ in UInt8.random(in: 0...255, using: &g) })
    }
}

/// What `probeConditionalWrites` found beyond the conditional writes it requires.
public struct S3Capabilities: Sendable {
    /// DELETE honours If-Match (else a conditional delete HEADs first: a short race remains).
    public var conditionalDelete: Bool
}

/// Runs `body(0..<count)` on up to `width` threads and waits for all (the callers are blocking
/// worker threads; GCD's concurrentPerform would run no wider than the cores).
enum S3Parallel {
    static func forEach(_ count: Int, width: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let threads = min(width, count)
        if threads <= 1 {
            for i in 0..<count { body(i) }
            return
        }
        let next = Locked(0)
        let group = DispatchGroup()
        for _ in 0..<threads {
            group.enter()
            let t = Thread {
                while true {
                    let i = next.update { n -> Int in
                        n += 1
                        return n - 1
                    }
                    if i >= count { break }
                    body(i)
                }
                group.leave()
            }
            t.start()
        }
        group.wait()
    }
}

/// A value several threads share, behind a lock (a class, so closures can hold it). Lock: leaf.
final class Locked<T: Sendable>: Sendable {
    private let mutex: Mutex<T>
    init(_ value: T) { mutex = Mutex(value) }
    var value: T { mutex.withLock { $0 } }
    @discardableResult
    func update<R: Sendable>(_ body: (inout T) -> R) -> R { mutex.withLock { body(&$0) } }
}
