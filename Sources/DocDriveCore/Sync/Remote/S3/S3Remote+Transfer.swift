// S3Remote+Transfer: downloads streamed to a descriptor (resumed with a Range after a break)
// and uploads streamed from one, with the conditions that keep another device's version.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
#if canImport(Glibc)
import Glibc
#endif

extension S3Remote {
    // MARK: Reading

    public func download(_ path: StorePath, version: String?, to out: Int32,
                         progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> RemoteItem {
        let key = try keys.key(path)
        var written: Int64 = 0
        var pinned = version
        var total: Int64 = -1
        var responseHead: HTTPResponseHead?
        var attempt = 0
        // Not truncated first: a placeholder is filled in place and keeps its size meanwhile
        // (Placeholder.swift); the end truncates to what came.
        while true {
            var headers = [(String, String)]()
            if let pinned { headers.append(("If-Match", "\"\(pinned)\"")) }
            if written > 0 { headers.append(("Range", "bytes=\(written)-")) }
            let resumeAt = written
            do throws(RemoteError) {
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
                    throw RemoteError(.changed, "\(path) changed on \(displayName) during its download.")
                case 404:
                    throw RemoteError(.notFound, "There is no \(path) on \(displayName).")
                case 412, 304:
                    throw RemoteError(.changed, "\(path) on \(displayName) is no longer the version asked for (another device changed it).")
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
            throw RemoteError(.io, "The download of \(path) from \(displayName) ended after \(written) of \(total) bytes.")
        }
        // Cut to what came (a placeholder filled in place may have been longer); a file that
        // has that size already is left alone (a truncate is a change: an event, a new ctime).
        var st = stat()
        if fstat(out, &st) != 0 || Int64(st.st_size) != written {
            guard ftruncate(out, off_t(written)) == 0 else { throw S3Client.describe(.write(errno)) }
        }
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
                       limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> RemoteItem {
        let meta = Self.meta(meta, writtenOver: expecting)
        let key = try keys.key(path)
        try checkConditionalWrites()
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
        try precheck(key, expecting, what: "upload \(path)")
        let headers = S3Meta.headers(meta, upload: token) + Self.condition(expecting) + [("Content-Type", "application/octet-stream")]
        let r = try client.send(.PUT, key: key, headers: headers, body: body, beforeRetry: { retried = true; sent = 0 })
        return try written(r, key: key, path: path, kind: .file, size: size, meta: meta, token: token, retried: retried,
                           expecting: expecting, what: "upload \(path)")
    }

    /// `meta` with the version a write is conditional on as its parent (`RemoteMeta.parent`).
    static func meta(_ meta: RemoteMeta, writtenOver expecting: RemoteExpectation) -> RemoteMeta {
        var m = meta
        switch expecting {
        case .absent: m.parent = RemoteMeta.created
        case .version(let v): m.parent = v
        }
        return m
    }

    /// The item a write made, from its answer; a refused condition is `.changed`, unless
    /// a retried request finds its own earlier attempt's object there (same upload token).
    func written(_ r: S3Response, key: String, path: StorePath, kind: SyncEntry.Kind, size: Int64, meta: RemoteMeta,
                 token: String?, retried: Bool, expecting: RemoteExpectation, what: String) throws(RemoteError) -> RemoteItem {
        switch r.status {
        case 200:
            // A completed multipart upload gives its ETag in the body.
            let etag = Self.unquoted(r.header("ETag") ?? S3XML(r.body).value("ETag") ?? "")
            heads.keep(Head(etag: etag, size: size, meta: meta, link: kind == .symlink, upload: token,
                            answered: r.header("Date").flatMap(Self.modifiedSecond)), for: key)
            return RemoteItem(path: path, kind: kind, version: etag, size: size, meta: meta)
        case 412 where retried && token != nil, 409 where retried && token != nil, 404 where retried && token != nil:
            // An earlier attempt may have succeeded with its answer lost (a retried complete
            // finds its upload gone): the object is ours if it carries this upload's token.
            if let h = try head(key), h.upload == token {
                return RemoteItem(path: path, kind: kind, version: h.etag, size: h.size, meta: h.meta)
            }
            throw client.failure(r, what)
        case 404 where expecting != .absent:
            throw RemoteError(.changed, "Cannot \(what): it was deleted on \(displayName) meanwhile (by another device).")
        default:
            throw client.failure(r, what)
        }
    }
}
