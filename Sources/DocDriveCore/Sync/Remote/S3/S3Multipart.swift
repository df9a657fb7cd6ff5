// S3Multipart: large files go up in parts sent in parallel (each part streamed from the file,
// so memory stays flat), objects over 5 GiB are copied in parts, and the uploads a crash left
// behind are aborted at the next start.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
#if canImport(Glibc)
import Glibc
#endif

extension S3Remote {
    /// Where this device records its unfinished multipart uploads: one small object per upload
    /// (body: key and upload id), written before the first part and deleted after the last
    /// step, so that `removeStaleUploads` finds what a crash left without a local database.
    var uploadRecords: String { keys.ownKey(S3Keys.ownFolder + "/uploads/" + device + "/") }

    func uploadMultipart(from source: Int32, size: Int64, key: String, path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                         limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> RemoteItem {
        let what = "upload \(path)"
        // Fail before sending gigabytes when the condition is already false.
        let current = try head(key)
        switch expecting {
        case .absent where current != nil, .version where current == nil:
            throw RemoteError(.changed, "Cannot \(what): \(displayName) holds another version (another device wrote it).")
        case .version(let v) where current?.etag != v:
            throw RemoteError(.changed, "Cannot \(what): \(displayName) holds another version (another device wrote it).")
        default: break
        }
        retryPendingAborts()
        let token = Self.randomToken()
        let (uploadID, record) = try beginMultipart(key: key, meta: meta, token: token, what: what)
        func abort() { abortUpload(PendingAbort(key: key, uploadID: uploadID, record: record)) }
        // S3 takes at most 10,000 parts: a file too large for the configured size gets larger parts.
        let partSize = max(client.settings.partSize, (((size + 9_999) / 10_000 + (1 << 20) - 1) >> 20) << 20)
        let count = Int((size + partSize - 1) / partSize)
        let etags = Locked([String?](repeating: nil, count: count))
        let failure = Locked<RemoteError?>(nil)
        let sent = Locked<Int64>(0)
        let client = self.client
        let done = DispatchSemaphore(value: 0)
        let owner = CrashGuard.currentStore
        let worker = Thread {
            CrashGuard.working(for: owner)
            S3Parallel.forEach(count, width: client.settings.parallelParts) { i in
                if failure.value != nil { return }
                let offset = Int64(i) * partSize
                let length = min(partSize, size - offset)
                var mine: Int64 = 0
                let body = S3Body.file(fd: source, offset: offset, length: length, limit: limit, sent: { n in
                    mine += Int64(n)
                    sent.update { $0 += Int64(n) }
                })
                do throws(RemoteError) {
                    let r = try client.send(.PUT, key: key, query: [("partNumber", String(i + 1)), ("uploadId", uploadID)], body: body,
                                            beforeRetry: {
                                                sent.update { $0 -= mine }
                                                mine = 0
                                            })
                    guard r.status == 200, let etag = r.header("ETag") else { throw client.failure(r, what) }
                    etags.update { $0[i] = etag }
                } catch {
                    failure.update { if $0 == nil { $0 = error } }
                }
            }
            done.signal()
        }
        worker.start()
        // The parts go on other threads; this one reports their progress.
        while done.wait(timeout: .now() + .milliseconds(250)) == .timedOut {
            progress?(sent.value, size)
        }
        if let e = failure.value {
            abort()
            throw e
        }
        progress?(size, size)
        let parts = etags.value.enumerated().map { "<Part><PartNumber>\($0.offset + 1)</PartNumber><ETag>\(S3XML.escape($0.element ?? ""))</ETag></Part>" }
        let xml = "<CompleteMultipartUpload>" + parts.joined() + "</CompleteMultipartUpload>"
        var retried = false
        let r: S3Response
        do {
            r = try client.send(.POST, key: key, query: [("uploadId", uploadID)], headers: Self.condition(expecting),
                                body: .bytes(Array(xml.utf8)), beforeRetry: { retried = true })
        } catch {
            abort()
            throw error
        }
        // A complete may fail with 200 and an error document.
        var answer = r
        if S3XML(r.body).rootName == "Error" {
            switch S3XML(r.body).value("Code") {
            case "PreconditionFailed": answer.status = 412
            case "ConditionalRequestConflict": answer.status = 409
            case "NoSuchUpload": answer.status = 404
            default: answer.status = 500
            }
        }
        do {
            let item = try written(answer, key: key, path: path, kind: .file, size: size, meta: meta, token: token, retried: retried,
                                   expecting: expecting, what: what)
            _ = try? client.send(.DELETE, key: record)
            return item
        } catch {
            abort()
            throw error
        }
    }

    /// Starts a multipart upload of `key` and records it under `uploadRecords` (the record
    /// first: an upload is never without one); returns the upload id and the record's key.
    func beginMultipart(key: String, meta: RemoteMeta, token: String, what: String) throws(RemoteError) -> (String, String) {
        let record = uploadRecords + token
        let created = try client.send(.POST, key: key, query: [("uploads", "")],
                                      headers: S3Meta.headers(meta, upload: token) + [("Content-Type", "application/octet-stream")])
        guard created.status == 200, let uploadID = S3XML(created.body).value("UploadId") else {
            throw client.failure(created, what)
        }
        let r: S3Response
        do {
            r = try client.send(.PUT, key: record, body: .bytes(Array("\(key)\n\(uploadID)\n".utf8)))
        } catch {
            abortUpload(PendingAbort(key: key, uploadID: uploadID, record: nil))
            throw error
        }
        guard r.status == 200 else {
            abortUpload(PendingAbort(key: key, uploadID: uploadID, record: nil))
            throw client.failure(r, what)
        }
        return (uploadID, record)
    }

    /// Aborts a multipart upload, then deletes its record; an upload the server did not
    /// confirm aborted (it is down, or answered an error) keeps its record and is remembered
    /// in `pendingAborts` to be tried again. A record is deleted only once its upload is gone.
    @discardableResult
    func abortUpload(_ u: PendingAbort) -> Bool {
        guard Self.aborted(try? client.send(.DELETE, key: u.key, query: [("uploadId", u.uploadID)])) else {
            pendingAborts.withLock { $0.append(u) }
            return false
        }
        if let record = u.record { _ = try? client.send(.DELETE, key: record) }
        return true
    }

    /// Whether an AbortMultipartUpload answer means the upload is gone (404: it already was).
    static func aborted(_ r: S3Response?) -> Bool {
        guard let r else { return false }
        return r.status == 204 || r.status == 200 || r.status == 404
    }

    public func finishCleanup() {
        if pendingAborts.withLock({ !$0.isEmpty }) { removeStaleUploads() }
        keepAnswers()
    }

    /// Tries again the aborts that failed before; returns how many now succeeded.
    @discardableResult
    func retryPendingAborts() -> Int {
        let pending = pendingAborts.withLock { p in defer { p = [] }; return p }
        return pending.filter { abortUpload($0) }.count
    }

    /// Starts a multipart upload of `path` and leaves it unfinished, as a crash would (for
    /// tests of `removeStaleUploads`); returns its upload id.
    public func beginUnfinishedUpload(at path: StorePath) throws(RemoteError) -> String {
        try beginMultipart(key: try keys.key(path), meta: RemoteMeta(), token: Self.randomToken(), what: "upload \(path)").0
    }

    /// The multipart uploads in progress under the store's prefix (ListMultipartUploads),
    /// of every device: keys and upload ids.
    public func uploadsInProgress() throws(RemoteError) -> [(key: String, uploadID: String)] {
        let r = try client.send(.GET, key: nil, query: [("uploads", ""), ("prefix", keys.keyPrefix)])
        guard r.status == 200 else { throw client.failure(r, "list the unfinished uploads of \(displayName)") }
        return S3XML(r.body).elements("Upload").compactMap { u in
            guard let k = u.value("Key"), let id = u.value("UploadId") else { return nil }
            return (k, id)
        }
    }

    /// Every key under the store's prefix, as S3 holds it (for tests and tools).
    public func objectKeys() throws(RemoteError) -> [String] {
        try listObjects(keyPrefix: keys.keyPrefix).map(\.key)
    }

    /// Copies an object larger than a single copy allows, in parts of `copyPartSize` (1 GiB).
    /// A multipart upload takes no metadata from its parts' source: the source's
    /// `x-amz-meta-*` (DocDrive's and other tools') and content headers are read first and
    /// given to the new upload, as a single copy keeps them.
    func copyMultipart(source: String, key: String, etag: String, size: Int64, to: String, what: String) throws(RemoteError) {
        if try head(to) != nil {
            throw RemoteError(.changed, "Cannot \(what): \(displayName) already has an item there (another device made it).")
        }
        let kept = Self.keptHeaders(try readSource(.HEAD, key, etag: etag, what: what))
        let created = try client.send(.POST, key: to, query: [("uploads", "")], headers: kept)
        guard created.status == 200, let uploadID = S3XML(created.body).value("UploadId") else { throw client.failure(created, what) }
        let part = copyPartSize
        var parts = [String]()
        do throws(RemoteError) {
            var offset: Int64 = 0
            var n = 1
            while offset < size {
                let end = min(size, offset + part) - 1
                let r = try client.send(.PUT, key: to, query: [("partNumber", String(n)), ("uploadId", uploadID)],
                                        headers: [("x-amz-copy-source", source), ("x-amz-copy-source-if-match", "\"\(etag)\""),
                                                  ("x-amz-copy-source-range", "bytes=\(offset)-\(end)")])
                guard r.status == 200, let e = S3XML(r.body).value("ETag") else { throw client.failure(r, what) }
                parts.append("<Part><PartNumber>\(n)</PartNumber><ETag>\(S3XML.escape(e))</ETag></Part>")
                offset = end + 1
                n += 1
            }
            let xml = "<CompleteMultipartUpload>" + parts.joined() + "</CompleteMultipartUpload>"
            let r = try client.send(.POST, key: to, query: [("uploadId", uploadID)], headers: [("If-None-Match", "*")], body: .bytes(Array(xml.utf8)))
            guard r.status == 200, S3XML(r.body).rootName != "Error" else { throw client.failure(r, what) }
        } catch {
            _ = try? client.send(.DELETE, key: to, query: [("uploadId", uploadID)])
            throw error
        }
    }

    /// Aborts the multipart uploads this device started and never finished (its records under
    /// `.docdrive/uploads/DEVICE/`), and deletes the records. Errors are left for the next time.
    /// Returns how many were aborted.
    @discardableResult
    public func removeStaleUploads() -> Int {
        var aborted = retryPendingAborts()
        guard let records = try? listObjects(keyPrefix: uploadRecords) else { return aborted }
        for record in records {
            guard let r = try? client.send(.GET, key: record.key), r.status == 200 else { continue }
            let lines = String(decoding: r.body, as: UTF8.self).split(separator: "\n").map(String.init)
            guard lines.count >= 2 else {
                // Not a record this code wrote: nothing to abort.
                _ = try? client.send(.DELETE, key: record.key)
                continue
            }
            // The record goes only with its upload: a failed abort is tried at the next start.
            let a = try? client.send(.DELETE, key: lines[0], query: [("uploadId", lines[1])])
            guard Self.aborted(a) else { continue }
            aborted += a?.status == 404 ? 0 : 1
            _ = try? client.send(.DELETE, key: record.key)
        }
        return aborted
    }
}
