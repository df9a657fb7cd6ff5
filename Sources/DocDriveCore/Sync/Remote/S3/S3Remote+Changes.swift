// S3Remote+Changes: folders, links, conditional deletes and moves (a copy conditional on the
// source's ETag, then a conditional delete).
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
#if canImport(Glibc)
import Glibc
#endif

extension S3Remote {
    // MARK: Folders, links, deletes, moves

    public func makeFolder(_ path: StorePath, meta: RemoteMeta) throws(RemoteError) -> RemoteItem {
        try checkConditionalWrites()
        let key = try keys.key(path, folder: true)
        if try head(keys.key(path)) != nil {
            throw RemoteError(.changed, "Cannot make the folder \(path): \(displayName) has a file of that name (another device made it).")
        }
        if ignoresConditions.load(ordering: .relaxed), let h = try head(key) {
            return RemoteItem(path: path, kind: .folder, version: "", size: 0, meta: h.meta)
        }
        let r = try client.send(.PUT, key: key, headers: S3Meta.headers(meta) + [("If-None-Match", "*")], body: .bytes([]))
        guard r.status == 200 || r.status == 412 || r.status == 409 else { throw client.failure(r, "make the folder \(path)") }
        if r.status != 200, let h = try head(key) {
            // Made by another device first: its metadata (its id) is the folder's.
            return RemoteItem(path: path, kind: .folder, version: "", size: 0, meta: h.meta)
        }
        return RemoteItem(path: path, kind: .folder, version: "", size: 0, meta: meta)
    }

    public func makeSymlink(_ target: [UInt8], at path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta) throws(RemoteError) -> RemoteItem {
        let meta = Self.meta(meta, writtenOver: expecting)
        try checkConditionalWrites()
        let key = try keys.key(path)
        let token = Self.randomToken()
        var retried = false
        try precheck(key, expecting, what: "make the link \(path)")
        let headers = S3Meta.headers(meta, link: true, upload: token) + Self.condition(expecting)
        let r = try client.send(.PUT, key: key, headers: headers, body: .bytes(target), beforeRetry: { retried = true })
        return try written(r, key: key, path: path, kind: .symlink, size: Int64(target.count), meta: meta, token: token,
                           retried: retried, expecting: expecting, what: "make the link \(path)")
    }

    public func delete(_ path: StorePath, version: String) throws(RemoteError) {
        try checkConditionalWrites()
        if version.isEmpty {
            let key = try keys.key(path, folder: true)
            let inside = try listObjects(keyPrefix: key, limit: 2).filter { !$0.key.utf8.elementsEqual(key.utf8) }
            if !inside.isEmpty {
                throw RemoteError(.changed, "Cannot delete the folder \(path): it is not empty on \(displayName) (another device put something in it).")
            }
            let r = try client.send(.DELETE, key: key)
            guard r.status == 204 || r.status == 200 || r.status == 404 else { throw client.failure(r, "delete the folder \(path)") }
            return
        }
        let key = try keys.key(path)
        try deleteObject(key, etag: version, what: "delete \(path)")
    }

    /// DELETE if the object is still `etag`; gone already is fine.
    func deleteObject(_ key: String, etag: String, what: String) throws(RemoteError) {
        if !conditionalDelete.load(ordering: .relaxed) {
            guard let h = try head(key) else { return }
            if h.etag != etag { throw RemoteError(.changed, "Cannot \(what): it changed on \(displayName) meanwhile (another device wrote it).") }
        }
        let r = try client.send(.DELETE, key: key, headers: [("If-Match", "\"\(etag)\"")])
        switch r.status {
        case 200, 204, 404:
            heads.forget(key)
        case 412 where try head(key) == nil, 409 where try head(key) == nil:
            // If-Match on a key that is gone fails (SeaweedFS): gone already is fine.
            break
        default:
            throw client.failure(r, what)
        }
    }

    public func move(_ from: StorePath, version: String, to: StorePath) throws(RemoteError) -> RemoteItem {
        try checkConditionalWrites()
        if version.isEmpty {
            let fromKey = try keys.key(from, folder: true)
            let toKey = try keys.key(to, folder: true)
            let objects = try listObjects(keyPrefix: fromKey)
            if objects.isEmpty { throw RemoteError(.notFound, "There is no folder \(from) on \(displayName).") }
            if try item(at: to) != nil {
                throw RemoteError(.changed, "Cannot move \(from) to \(to): \(displayName) already has an item there (another device made it).")
            }
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
            throw RemoteError(.changed, "Cannot move \(from): it was deleted on \(displayName) meanwhile.")
        }
        if source.etag != version {
            throw RemoteError(.changed, "Cannot move \(from): it changed on \(displayName) meanwhile (another device wrote it).")
        }
        try copyObject(fromKey, etag: version, size: source.size, to: toKey, what: "move \(from) to \(to)")
        do {
            try deleteObject(fromKey, etag: version, what: "move \(from) to \(to)")
        } catch where error.code == .changed {
            // Changed at its old path meanwhile (another device wrote it): the copy goes again,
            // or the remote would hold one item (one id) twice. Not moved.
            // (A copy in parts has an ETag of its own.)
            let copied = ((try? head(toKey)) ?? nil)?.etag ?? version
            try? deleteObject(toKey, etag: copied, what: "undo the move of \(from) to \(to)")
            throw error
        }
        guard let h = try head(toKey) else {
            throw RemoteError(.changed, "Moved \(from) to \(to), but another device deleted it there at once.")
        }
        return RemoteItem(path: to, kind: h.link ? .symlink : .file, version: h.etag, size: h.size, meta: h.meta)
    }

    public func reassign(_ path: StorePath, version: String, meta: RemoteMeta) throws(RemoteError) -> RemoteItem {
        try checkConditionalWrites()
        let key = try keys.key(path)
        guard let h = try head(key), h.etag == version else {
            throw RemoteError(.changed, "\(path) changed on \(displayName) since this device last saw it.")
        }
        guard h.size <= S3Settings.partSizeRange.upperBound else {
            throw RemoteError(.unsupported, "\(path) is too large to be given new metadata by a copy onto itself.")
        }
        // A copy onto itself with new metadata: the bytes (and, for an object written in one
        // piece, the ETag) stay.
        var m = meta
        m.mtimeNanoseconds = meta.mtimeNanoseconds ?? h.meta.mtimeNanoseconds
        m.mode = meta.mode ?? h.meta.mode
        m.parent = version  // written over it
        let what = "give \(path) its own item id"
        if h.size <= Self.copyByRewriteLimit {
            // Read and written anew, as a move is (`copyByRewriteLimit`): a server-side copy onto
            // itself may land after another device's save of the same moment and bring back the
            // bytes that save replaced.
            try rewriteObject(key, etag: version, to: key, meta: S3Meta.headers(m, link: h.link, upload: h.upload), what: what)
        } else {
            let source = "/" + client.settings.bucket + "/" + SigV4.encode(key, slash: false)
            let r = try client.send(.PUT, key: key, headers: [("x-amz-copy-source", source), ("x-amz-copy-source-if-match", "\"\(version)\""),
                                                              ("x-amz-metadata-directive", "REPLACE"), ("Content-Type", "application/octet-stream")]
                                      + S3Meta.headers(m, link: h.link, upload: h.upload))
            if r.status == 412 || r.status == 404 || r.status == 409 {
                throw RemoteError(.changed, "\(path) changed on \(displayName) since this device last saw it.")
            }
            guard r.status == 200, S3XML(r.body).rootName != "Error" else {
                throw client.failure(r.status == 200 ? S3Response(status: 500, headers: r.headers, body: r.body) : r, what)
            }
        }
        guard let now = try head(key) else {
            throw RemoteError(.changed, "\(path) was deleted on \(displayName) meanwhile.")
        }
        return RemoteItem(path: path, kind: now.link ? .symlink : .file, version: now.etag, size: now.size, meta: now.meta)
    }

    /// Files up to this size are copied by a read and a new write (`rewriteObject`), not on the
    /// server. SeaweedFS's CopyObject honours `If-None-Match: *` but does not exclude a PutObject
    /// with it made at the same moment: both succeeded in 13 of 200 tries here (2026-11-27),
    /// and the one that landed last replaced the other without a word (another device's new
    /// file, or the moved item, lost). Two such PutObjects exclude each other (0 of 200).
    static let copyByRewriteLimit: Int64 = 16 << 20

    /// Copy of `key` (if still `etag`) to `to`, where nothing may be; metadata goes along.
    /// Small files are read and written anew (`copyByRewriteLimit`), the others copied on the
    /// server, those over 5 GiB in parts.
    func copyObject(_ key: String, etag: String, size: Int64, to: String, what: String) throws(RemoteError) {
        try precheck(to, .absent, what: what)
        if key.utf8.last != UInt8(ascii: "/"), size <= Self.copyByRewriteLimit {
            return try rewriteObject(key, etag: etag, to: to, what: what)
        }
        let source = "/" + client.settings.bucket + "/" + SigV4.encode(key, slash: false)
        if key.utf8.last == UInt8(ascii: "/") {
            // A folder marker (some servers keep it as a real folder, which no copy takes):
            // made anew, with its metadata.
            let meta = try head(key)?.meta ?? RemoteMeta()
            let r = try client.send(.PUT, key: to, headers: S3Meta.headers(meta) + [("If-None-Match", "*")], body: .bytes([]))
            guard r.status == 200 || r.status == 412 || r.status == 409 else { throw client.failure(r, what) }
            return
        }
        if size > copyInPartsAbove {
            return try copyMultipart(source: source, key: key, etag: etag, size: size, to: to, what: what)
        }
        var retried = false
        let r = try client.send(.PUT, key: to, headers: [("x-amz-copy-source", source), ("x-amz-copy-source-if-match", "\"\(etag)\""),
                                                         ("If-None-Match", "*")], beforeRetry: { retried = true })
        if r.status == 200, S3XML(r.body).rootName != "Error" { return }
        // A retried copy whose first attempt landed: the target holds the source's version.
        if retried, r.status == 412 || r.status == 409, let h = try head(to), h.etag == etag { return }
        if r.status == 404 { throw RemoteError(.changed, "Cannot \(what): the source was deleted on \(displayName) meanwhile.") }
        if r.status == 200 { throw client.failure(S3Response(status: 500, headers: r.headers, body: r.body), what) }
        throw client.failure(r, what)
    }

    /// The headers of an object's content that a rewrite keeps (lowercase).
    static let contentHeaders: Set<String> = ["content-type", "content-encoding", "content-language", "content-disposition", "cache-control", "expires"]

    /// The source `key` of a copy, read (GET) or looked at (HEAD) if it is still `etag`.
    func readSource(_ method: HTTPMethod, _ key: String, etag: String, what: String) throws(RemoteError) -> S3Response {
        let r = try client.send(method, key: key, headers: [("If-Match", "\"\(etag)\"")])
        switch r.status {
        case 200: return r
        case 404: throw RemoteError(.changed, "Cannot \(what): the source was deleted on \(displayName) meanwhile.")
        case 412: throw RemoteError(.changed, "Cannot \(what): it changed on \(displayName) meanwhile (another device wrote it).")
        default: throw client.failure(r, what)
        }
    }

    /// What a server-side copy keeps of an object, which a copy made otherwise carries along as
    /// it is: every `x-amz-meta-*` (DocDrive's and other tools') and the content headers.
    static func keptHeaders(_ r: S3Response) -> [(String, String)] {
        r.headerPairs.filter { name, _ in
            let n = name.lowercased()
            return n.hasPrefix(S3Meta.header) || contentHeaders.contains(n)
        }
    }

    /// A small file's bytes and metadata read (if still `etag`) and written anew: to `to`, where
    /// nothing may be (`copyObject`), or onto itself with DocDrive's metadata replaced by `meta`
    /// if it is still `etag` (`reassign`). Both writes are conditional PutObjects, which exclude
    /// a save or create of another device made at the same moment; a server-side copy does not.
    private func rewriteObject(_ key: String, etag: String, to: String, meta: [(String, String)]? = nil,
                               what: String) throws(RemoteError) {
        let got = try readSource(.GET, key, etag: etag, what: what)
        // New metadata replaces DocDrive's own fields only.
        var kept = Self.keptHeaders(got)
        if let meta {
            kept = kept.filter { !S3Meta.isOwn($0.0) } + meta
        } else {
            // A copy at a new path was written where nothing was (`RemoteMeta.parent`).
            kept = kept.filter { $0.0.lowercased() != S3Meta.header + S3Meta.parent } + [(S3Meta.header + S3Meta.parent, RemoteMeta.created)]
        }
        let type: [(String, String)] = kept.contains { $0.0.lowercased() == "content-type" } ? [] : [("Content-Type", "application/octet-stream")]
        let condition = to == key ? ("If-Match", "\"\(etag)\"") : ("If-None-Match", "*")
        var retried = false
        let r = try client.send(.PUT, key: to, headers: kept + type + [condition],
                                body: .bytes(got.body), beforeRetry: { retried = true })
        if r.status == 200 { return }
        // A retried write whose first attempt landed: the target holds these bytes.
        let written = S3Meta.meta(kept).meta.itemID
        if retried, r.status == 412 || r.status == 409, let h = try head(to), h.size == Int64(got.body.count),
           h.meta.itemID == written { return }
        if to == key, r.status == 412 || r.status == 404 {
            throw RemoteError(.changed, "Cannot \(what): it changed on \(displayName) meanwhile (another device wrote it).")
        }
        throw client.failure(r, what)
    }
}
