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
/// HEADs each object whose (key, ETag, last-modified second) it has not seen yet, and keeps the
/// answers in memory: a second listing HEADs only what changed. An ETag is the content's MD5,
/// so another item written with the same bytes (a file moved away and a copy of it uploaded
/// under the old name) keeps the ETag; its time tells it apart, its HEAD gives its item id.
/// `list(metadata: false)` skips the HEADs; `listQuickly` and `complete` are the two steps
/// (RemoteListing), the listing's pages read on a thread of their own.
///
/// Threads: every method blocks its caller (a worker thread, never a FUSE request thread or an
/// event loop) until S3 answered. Locks (`heads`, the `Locked` boxes, the `Handoff`s of
/// S3HTTP) are leaves, and none is held across a request; but `heads.writing`, held across the
/// writing of the answers file (disk calls, no request), takes `heads`' own state under it.
public final class S3Remote: Remote, Sendable {
    public let client: S3Client
    public let keys: S3Keys
    /// Tags this device's multipart upload records (DeviceIdentity.tag).
    public let device: String
    /// Keys per listing page (S3's maximum is 1000; tests make it small to page).
    public let pageSize: Int
    /// Objects larger than this are copied on the server in parts (`copyMultipart`), of
    /// `copyPartSize` each: S3's single copy takes at most 5 GiB. Smaller in tests.
    let copyInPartsAbove: Int64
    let copyPartSize: Int64
    /// HEAD answers by key (its bytes: Strings that are canonically equivalent are equal),
    /// valid while the key's ETag is the same.
    let heads = S3HeadCache()
    /// Where the HEAD answers are kept across a restart (`S3HeadCache+File`): the store's own
    /// folder; nil keeps them in memory only.
    let answersFile: String?
    /// HEAD requests sent (the one cost of a listing beyond its pages; tests count them).
    public var headsSent: Int { headCount.load(ordering: .relaxed) }
    private let headCount = Atomic<Int>(0)
    /// How many items the last listing had: the next one is made that large at once (grown one
    /// doubling at a time, the array of 100,000 items had room for 131,072: 4.5 MB unused).
    private let lastListed = Atomic<Int>(0)
    /// Whether DELETE honours If-Match, once `probeConditionalWrites` found out. Without it a
    /// conditional delete HEADs first (a short race remains).
    let conditionalDelete = Atomic<Bool>(false)
    /// Whether this process probed the server (its first write does, once: `store add`
    /// probed it from another process, and the server may have changed since).
    let probed = Atomic<Bool>(false)
    /// Set while one thread probes: the others wait for it rather than probe too (the workers
    /// of a store all start writing at once).
    let probing = Atomic<Bool>(false)
    /// This run's count of journal objects written (the last part of their names).
    let journalSeq = Atomic<Int>(0)
    /// The server time of the last removal of old journal objects (`removeOldJournalObjects`).
    let journalSwept = Atomic<Int64>(0)
    /// The probe found a server that ignores conditional writes and the store accepts it
    /// (`conditional-writes: checked`): every write HEADs first (`precheck`).
    let ignoresConditions = Atomic<Bool>(false)
    /// Multipart uploads this process started and could not abort (the server was down):
    /// tried again before the next multipart upload and by `removeStaleUploads`. Lock: leaf.
    let pendingAborts = Mutex<[PendingAbort]>([])

    struct PendingAbort: Sendable {
        var key: String
        var uploadID: String
        /// The upload's record, nil when writing it failed.
        var record: String?
    }

    package struct Head: Sendable {
        package var etag: String
        package var size: Int64
        package var meta: RemoteMeta
        package var link: Bool
        package var upload: String?
        /// When the object was written, to the second ("YYYYMMDDHHMMSS", UTC; `modifiedSecond`);
        /// nil when not known (an answer to this device's own write has none).
        package var modified: String? = nil
        /// For this device's own write: the second of the server's answer (its `Date`). The
        /// object's `LastModified` is that second or the one before (the request arrived then),
        /// so the next listing needs no HEAD to know it is the object written here.
        package var answered: String? = nil

        package init(etag: String, size: Int64, meta: RemoteMeta, link: Bool, upload: String?,
                     modified: String? = nil, answered: String? = nil) {
            self.etag = etag
            self.size = size
            self.meta = meta
            self.link = link
            self.upload = upload
            self.modified = modified
            self.answered = answered
        }
    }

    public init(client: S3Client, device: String, pageSize: Int = 1000,
                copyInPartsAbove: Int64 = S3Settings.partSizeRange.upperBound, copyPartSize: Int64 = 1 << 30,
                answersFile: String? = nil) {
        self.client = client
        self.answersFile = answersFile
        self.keys = S3Keys(prefix: client.settings.prefix)
        self.device = device
        self.pageSize = max(1, min(1000, pageSize))
        self.copyInPartsAbove = copyInPartsAbove
        self.copyPartSize = max(S3Settings.partSizeRange.lowerBound, copyPartSize)
    }

    /// The remote of a store's settings, with credentials from where `SigV4.Credentials.load`
    /// looks.
    public convenience init(settings: S3Settings, device: String, answersFile: String? = nil) throws(RemoteError) {
        let file = settings.credentialsFile
        let credentials = try SigV4.Credentials.load(credentialsFile: file)
        self.init(client: try S3Client(settings: settings, credentials: credentials,
                                       reload: { () throws(RemoteError) in try SigV4.Credentials.load(credentialsFile: file) }),
                  device: device, answersFile: answersFile)
    }

    // MARK: Answers kept across a restart

    /// Which remote the answers file is of: another endpoint, bucket or prefix gets none.
    var answersIdentity: String {
        let s = client.settings
        return [s.endpoint, s.bucket, s.prefix].joined(separator: "\n")
    }

    /// Takes the HEAD answers kept by the last run (before the first listing); returns how
    /// many, nil when there were none. A file that cannot be used throws its sentence.
    public func loadKeptAnswers() throws(RemoteError) -> Int? {
        guard let answersFile else { return nil }
        return try heads.read(from: answersFile, identity: answersIdentity)
    }

    /// Writes the HEAD answers to their file when they changed: at the stop, and after a
    /// listing that looked many objects up (a daemon killed after it keeps them too). A
    /// failure costs HEADs at the next start, nothing else.
    public func keepAnswers() {
        guard let answersFile else { return }
        _ = try? heads.write(to: answersFile, identity: answersIdentity)
    }

    public var displayName: String { client.settings.displayName }

    // MARK: Store set-up

    /// Throws a sentence unless the bucket answers to these credentials.
    /// Whether the store's prefix holds anything but DocDrive's own keys (a look at a few keys).
    public func holdsDocuments() throws(RemoteError) -> Bool {
        let own = [keys.ownKey(S3Keys.markerName), keys.ownKey(S3Keys.ownFolder + "/")]
        if try listObjects(keyPrefix: keys.keyPrefix, limit: 5).contains(where: { item in
            !own.contains { item.key == $0 || ($0.hasSuffix("/") && item.key.hasPrefix($0)) }
        }) { return true }
        // The store's own folder may hold more than a page (the journal): the keys after it
        // (".docdrive0" sorts after every ".docdrive/..." key; no document's key starts so,
        // S3Keys escapes such names).
        return !(try listObjects(keyPrefix: keys.keyPrefix, limit: 1, startAfter: keys.ownKey(S3Keys.ownFolder + "0"))).isEmpty
    }

    public func checkBucket() throws(RemoteError) {
        let r = try client.send(.GET, key: nil, query: [("list-type", "2"), ("max-keys", "1"), ("prefix", keys.keyPrefix)])
        guard r.status == 200 else { throw client.failure(r, "list \(displayName)") }
    }

    public func checkReachable() throws(RemoteError) {
        let r = try client.send(.HEAD, key: keys.ownKey(S3Keys.markerName))
        if r.status == 200 { return }
        if r.status == 404 {
            // A HEAD has no body: tell a missing bucket from a missing marker.
            try checkBucket()
            throw RemoteError(.unreachable, "\(displayName) is not the store's (no \(S3Keys.markerName) in it); add the store with `docdrive store add` first.")
        }
        throw client.failure(r, "reach \(displayName)")
    }

    /// Writes the marker (at `store add`); one that is there already (another device made the
    /// store) is kept: this device joins the store.
    public func writeMarker(store: String) throws(RemoteError) {
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
    public func probeConditionalWrites() throws(RemoteError) -> S3Capabilities {
        let key = keys.ownKey(S3Keys.ownFolder + "/probe-\(device)-\(Self.randomToken())")
        let body = S3Body.bytes(Array("DocDrive probe\n".utf8))
        defer { _ = try? client.send(.DELETE, key: key) }
        var retried = false
        let first = try client.send(.PUT, key: key, headers: [("If-None-Match", "*")], body: body, beforeRetry: { retried = true })
        // (A refusal after a retry is the first attempt's own object: the key is new.)
        guard first.status == 200 || retried && (first.status == 412 || first.status == 409) else {
            throw client.failure(first, "write a probe object to \(displayName)")
        }
        let second = try client.send(.PUT, key: key, headers: [("If-None-Match", "*")], body: body)
        if second.status == 200 {
            return try unconditional("If-None-Match: * (it let a create-only write replace an object)")
        }
        guard second.status == 412 || second.status == 409 else { throw client.failure(second, "probe conditional writes on \(displayName)") }
        let replace = try client.send(.PUT, key: key, headers: [("If-Match", "\"00000000000000000000000000000000\"")], body: body)
        if replace.status == 200 {
            return try unconditional("If-Match (it let a write replace an object of another ETag)")
        }
        let delete = try client.send(.DELETE, key: key, headers: [("If-Match", "\"00000000000000000000000000000000\"")])
        let honoured = delete.status == 412 || delete.status == 409
        conditionalDelete.store(honoured, ordering: .relaxed)
        probed.store(true, ordering: .releasing)
        return S3Capabilities(conditionalDelete: honoured, conditionalWrites: true)
    }

    /// A server that ignores conditional writes: refused, unless the store accepts the weaker
    /// mode, in which every write checks the version with a HEAD first.
    private func unconditional(_ what: String) throws(RemoteError) -> S3Capabilities {
        guard client.settings.checkedWrites else {
            throw RemoteError(.unsupported, "The S3 server at \(client.endpointName) ignores \(what), so two devices could overwrite each other's changes; DocDrive refuses to use it unless the store is added with --accept-unconditional-writes (a weaker mode, see the README).")
        }
        ignoresConditions.store(true, ordering: .relaxed)
        conditionalDelete.store(false, ordering: .relaxed)
        probed.store(true, ordering: .releasing)
        return S3Capabilities(conditionalDelete: false, conditionalWrites: false)
    }

    /// Before a write to a server that ignores conditions (see `ignoresConditions`): throws
    /// `.changed` unless `key` is what `expecting` says. A no-op on a server that honours
    /// conditions, where the write itself carries them.
    func precheck(_ key: String, _ expecting: RemoteExpectation, what: String) throws(RemoteError) {
        guard ignoresConditions.load(ordering: .relaxed) else { return }
        let current = try head(key)
        switch expecting {
        case .absent where current != nil:
            throw RemoteError(.changed, "Cannot \(what): \(displayName) has an item there already (another device made it).")
        case .version where current == nil:
            throw RemoteError(.changed, "Cannot \(what): it was deleted on \(displayName) meanwhile (by another device).")
        case .version(let v) where current?.etag != v:
            throw RemoteError(.changed, "Cannot \(what): it changed on \(displayName) meanwhile (another device wrote it).")
        default: return
        }
    }

    /// Probes the server before this process's first write: one thread probes, the others wait
    /// for it (a probe that fails leaves the next one to probe again). Throws what the probe
    /// throws: a server that stopped honouring conditional writes gets no write.
    func checkConditionalWrites() throws(RemoteError) {
        while !probed.load(ordering: .acquiring) {
            if probing.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged {
                defer { probing.store(false, ordering: .releasing) }
                if probed.load(ordering: .acquiring) { return }
                try probeConditionalWrites()
                return
            }
            usleep(2_000)  // another thread probes; if its probe fails, this one probes itself
        }
    }

    // MARK: Listing

    public func list() throws(RemoteError) -> [RemoteItem] { try list(metadata: true) }

    /// Every item of the store. With `metadata`, each file's metadata and kind (file or link)
    /// come from a HEAD unless this (key, ETag) was seen before; without, files are `.file`
    /// with the metadata known so far.
    public func list(metadata: Bool) throws(RemoteError) -> [RemoteItem] {
        let listing = try listQuickly()
        return metadata ? try complete(listing) : listing.items
    }

    /// The keys alone (a request per thousand): what a HEAD answered before for the same key,
    /// ETag and second is taken from memory; every other object (and folder marker) is pending,
    /// with the listing's `LastModified` as its time.
    public func listQuickly() throws(RemoteError) -> RemoteListing { try listQuickly(pages: { _, _ in }) }

    /// `listQuickly`, handing the items of each page of the listing (with the folders its keys
    /// imply, not handed before) to `page` while the next page comes, with those of them that
    /// are pending. A key of a later page may still make a file handed over a folder (a folder
    /// wins over a file of the same name), and a folder handed over as implied may have its
    /// marker (its metadata) in a later page: the listing returned is what counts.
    public func listQuickly(pages page: (_ items: [RemoteItem], _ pending: Set<StorePath>) -> Void) throws(RemoteError) -> RemoteListing {
        // The items in one array, found by path through their place in it (a map of the items
        // themselves and then a sorted copy of its values held every item twice at the end).
        let expected = lastListed.load(ordering: .relaxed)
        var items = [RemoteItem]()
        items.reserveCapacity(expected + expected / 32)
        var at = [StorePath: Int](minimumCapacity: expected + expected / 32)
        func put(_ item: RemoteItem) {
            if let k = at[item.path] { items[k] = item } else { at[item.path] = items.count; items.append(item) }
        }
        func kind(_ path: StorePath) -> SyncEntry.Kind? { at[path].map { items[$0].kind } }
        var lookups = [StorePath: RemoteListing.Lookup]()
        var unshown = [String](), unshownCount = 0
        func add(_ o: Listed, _ added: inout [StorePath]) {
            guard let (path, isFolder) = keys.path(ofKey: o.key) else {
                if keys.isUnshown(o.key) {
                    unshownCount += 1
                    if unshown.count < RemoteListing.unshownKept { unshown.append(o.key) }
                }
                return
            }
            let cached = cachedHead(o.key, etag: o.etag, modified: o.modified)
            var pendingMeta = RemoteMeta()
            pendingMeta.mtimeNanoseconds = o.modified.flatMap(Self.nanoseconds(ofSecond:))
            if isFolder {
                // A marker carries the folder's metadata (its item id).
                var item = RemoteItem(path: path, kind: .folder, version: "", size: 0)
                if let cached { item.meta = cached.meta } else { lookups[path] = .init(key: o.key, modified: o.modified) }
                put(item)
                added.append(path)
            } else if kind(path) != .folder {
                var item = RemoteItem(path: path, kind: .file, version: o.etag, size: o.size)
                if let cached {
                    item.meta = cached.meta
                    item.version = cached.etag  // the same ETag, one string for both
                    if cached.link { item.kind = .symlink }
                } else {
                    item.meta = pendingMeta
                    lookups[path] = .init(key: o.key, modified: o.modified)
                }
                put(item)
                added.append(path)
            }
            // Folders implied by the keys under them (objects other tools put) are folders too;
            // a folder wins over a file of the same name.
            var folder = path.folder
            var implied = [StorePath]()
            while !folder.isEmpty {
                if kind(folder) == .folder { break }
                put(RemoteItem(path: folder, kind: .folder, version: "", size: 0))
                implied.append(folder)
                folder = folder.folder
            }
            added.append(contentsOf: implied)
        }
        try listObjects(keyPrefix: keys.keyPrefix) { objects in
            var added = [StorePath]()
            for o in objects { add(o, &added) }
            var seen = Set<StorePath>()
            let handed = added.compactMap { p -> RemoteItem? in seen.insert(p).inserted ? at[p].map { items[$0] } : nil }
            page(handed, Set(handed.lazy.map(\.path).filter { lookups[$0] != nil }))
        }
        at = [:]
        lastListed.store(items.count, ordering: .relaxed)
        items.sort { $0.path < $1.path }
        var listing = RemoteListing(items: items, lookups: lookups)
        listing.unshown = unshown
        listing.unshownCount = unshownCount
        return listing
    }

    /// HEADs the pending items of `listing`, 16 at once, a part (`completePart` items) at a
    /// time: each part's answers go into the items before the next part is asked for, so that
    /// no second map of every answer is held beside `heads` (a store of 100,000 items just
    /// joined: about 25 MB).
    public func complete(_ listing: consuming RemoteListing) throws(RemoteError) -> [RemoteItem] {
        if listing.lookups.isEmpty { return listing.items }
        var items = listing.items
        listing.items = []  // so that `items` is the only reference (written in place, not copied)
        let wanted = items.indices.filter { listing.lookups[items[$0].path] != nil }
        var from = 0
        while from < wanted.count {
            let part = wanted[from..<min(from + Self.completePart, wanted.count)].map { i in
                (i, listing.lookups[items[i].path]!)
            }
            from += part.count
            let found = Locked<[Int: Head]>([:])
            let failure = Locked<RemoteError?>(nil)
            S3Parallel.forEach(part.count, width: 16) { j in
                if failure.value != nil { return }
                do throws(RemoteError) {
                    // Kept with the listing's time: the next listing compares with that.
                    if let h = try self.head(part[j].1.key, listedModified: part[j].1.modified) {
                        found.update { $0[part[j].0] = h }
                    }
                } catch {
                    failure.update { if $0 == nil { $0 = error } }
                }
            }
            if let e = failure.value { throw e }
            let heads = found.value
            for (i, _) in part {
                guard let h = heads[i] else {
                    // Gone since it was listed (a later listing will not have it): no metadata.
                    items[i].meta = RemoteMeta()
                    continue
                }
                if items[i].kind == .folder {
                    items[i].meta = h.meta
                    continue
                }
                items[i].version = h.etag
                items[i].size = h.size
                items[i].meta = h.meta
                items[i].kind = h.link ? .symlink : .file
            }
        }
        if wanted.count >= Self.lookupsKeptAtOnce { keepAnswers() }
        return items
    }

    /// After a listing that looked up at least this many objects, the answers are written to
    /// their file at once rather than at the stop.
    static let lookupsKeptAtOnce = 500

    /// How many pending items `complete` HEADs before it writes their answers into the items.
    static let completePart = 2048

    /// Nanoseconds since 1970 of a second as `modifiedSecond` writes it ("YYYYMMDDHHMMSS", UTC),
    /// clamped to what an Int64 holds (a listing may say any year up to 9999).
    static func nanoseconds(ofSecond second: String) -> Int64? {
        seconds(ofSecond: second).map { Timestamp.nanoseconds(seconds: $0, nanoseconds: 0) }
    }

    /// Seconds since 1970 of a second as `modifiedSecond` writes it ("YYYYMMDDHHMMSS", UTC).
    static func seconds(ofSecond second: String) -> Int64? {
        let d = Array(second.utf8)
        guard d.count == 14, d.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        func n(_ r: Range<Int>) -> Int32 { d[r].reduce(0) { $0 * 10 + Int32($1 - 0x30) } }
        var t = tm()
        t.tm_year = n(0..<4) - 1900
        t.tm_mon = n(4..<6) - 1
        t.tm_mday = n(6..<8)
        t.tm_hour = n(8..<10)
        t.tm_min = n(10..<12)
        t.tm_sec = n(12..<14)
        return Int64(timegm(&t))
    }

    struct Listed { var key: String; var etag: String; var size: Int64; var modified: String? }

    /// Every object under `keyPrefix`, page by page (ListObjectsV2), each page handed to
    /// `page` (on the calling thread) while the next one is asked for on another thread.
    func listObjects(keyPrefix: String, pages page: ([Listed]) -> Void) throws(RemoteError) {
        // Pages fetched and not yet handed over (at most 4 ahead), the fetch's end or failure.
        struct Ahead: Sendable { var pages = [[Listed]](); var done = false; var failure: RemoteError? }
        let ahead = Locked(Ahead())
        let ready = DispatchSemaphore(value: 0)
        let room = DispatchSemaphore(value: 4)
        let stop = Locked(false)
        let owner = CrashGuard.currentStore
        let fetcher = Thread { [self] in
            CrashGuard.working(for: owner)
            do throws(RemoteError) {
                var token: String?
                repeat {
                    room.wait()
                    if stop.value { break }
                    let (listed, next) = try listPage(keyPrefix: keyPrefix, token: token, maxKeys: pageSize)
                    ahead.update { $0.pages.append(listed) }
                    ready.signal()
                    token = next
                } while token != nil
                ahead.update { $0.done = true }
            } catch {
                ahead.update { $0.failure = error; $0.done = true }
            }
            ready.signal()
        }
        fetcher.name = "docdrive-list"
        fetcher.start()
        defer { stop.update { $0 = true }; room.signal() }
        while true {
            ready.wait()
            let (got, done, failure) = ahead.update { a -> ([[Listed]], Bool, RemoteError?) in
                let out = (a.pages, a.done, a.failure)
                a.pages.removeAll()
                return out
            }
            for p in got {
                page(p)
                room.signal()
            }
            if let failure { throw failure }
            if done { return }
        }
    }

    /// One page of a listing and the token of the next (nil after the last).
    func listPage(keyPrefix: String, token: String?, maxKeys: Int, startAfter: String? = nil) throws(RemoteError) -> ([Listed], String?) {
        var out = [Listed]()
        var query = [("list-type", "2"), ("prefix", keyPrefix), ("encoding-type", "url"), ("max-keys", String(maxKeys))]
        if let token { query.append(("continuation-token", token)) }
        if let startAfter { query.append(("start-after", startAfter)) }
        let r = try client.send(.GET, key: nil, query: query)
        guard r.status == 200 else { throw client.failure(r, "list \(displayName)") }
        let xml = S3XML(r.body)
        let urlEncoded = xml.value("EncodingType") == "url"
        for c in xml.elements("Contents") {
            guard var key = c.value("Key") else { continue }
            if urlEncoded { key = Self.urlDecoded(key) }
            out.append(Listed(key: key, etag: Self.unquoted(c.value("ETag") ?? ""), size: Int64(c.value("Size") ?? "") ?? 0,
                              modified: c.value("LastModified").flatMap(Self.modifiedSecond)))
        }
        return (out, xml.value("IsTruncated") == "true" ? xml.value("NextContinuationToken") : nil)
    }

    /// Every object under `keyPrefix`, page by page (ListObjectsV2).
    func listObjects(keyPrefix: String, limit: Int? = nil, startAfter: String? = nil) throws(RemoteError) -> [Listed] {
        var out = [Listed]()
        var token: String?
        repeat {
            let (page, next) = try listPage(keyPrefix: keyPrefix, token: token, maxKeys: min(pageSize, limit ?? pageSize), startAfter: startAfter)
            out += page
            token = next
            if let limit, out.count >= limit { break }
        } while token != nil
        return out
    }

    public func item(at path: StorePath) throws(RemoteError) -> RemoteItem? {
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

    /// HEAD of a key: nil when there is no object. The answer is kept with `listedModified`
    /// (the time a listing gave) when there is one, else with the answer's own time.
    func head(_ key: String, listedModified: String? = nil) throws(RemoteError) -> Head? {
        headCount.add(1, ordering: .relaxed)
        let r = try client.send(.HEAD, key: key)
        if r.status == 404 { return nil }
        guard r.status == 200 else { throw client.failure(r, "read the metadata of \(key)") }
        let (meta, link, upload) = S3Meta.meta(r.headerPairs)
        let h = Head(etag: Self.unquoted(r.header("ETag") ?? ""), size: Int64(r.header("Content-Length") ?? "") ?? 0,
                     meta: meta, link: link, upload: upload,
                     modified: listedModified ?? r.header("Last-Modified").flatMap(Self.modifiedSecond))
        return heads.keep(h, for: key)
    }

    /// The HEAD answer kept for `key`, while it is the object a listing shows: same ETag, and
    /// written in the same second (an answer of unknown time is looked up again).
    func cachedHead(_ key: String, etag: String, modified: String?) -> Head? {
        guard let h = heads.answer(for: key, etag: etag) else { return nil }
        guard let modified else { return h }
        if let m = h.modified { return m == modified ? h : nil }
        // Written here: the listing shows it if it was written in the second the server answered
        // or the one before (a write of the same bytes by another tool in those two seconds is
        // the one case taken for this device's own; anything else is looked up).
        guard let a = h.answered, modified == a || modified == Self.secondBefore(a) else { return nil }
        return h
    }

    /// The second before `second` ("YYYYMMDDHHMMSS", UTC), in the same form.
    static func secondBefore(_ second: String) -> String? {
        guard let s = seconds(ofSecond: second) else { return nil }
        var before = time_t(s - 1)
        var u = tm()
        guard gmtime_r(&before, &u) != nil else { return nil }
        func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return "\(u.tm_year + 1900)\(two(u.tm_mon + 1))\(two(u.tm_mday))\(two(u.tm_hour))\(two(u.tm_min))\(two(u.tm_sec))"
    }

    // MARK: Helpers

    static func condition(_ e: RemoteExpectation) -> [(String, String)] {
        switch e {
        case .absent: return [("If-None-Match", "*")]
        case .version(let v): return [("If-Match", "\"\(v)\"")]
        }
    }

    /// A listing's `LastModified` (ISO 8601: "2026-11-23T02:09:38.000Z") or a HEAD's
    /// `Last-Modified` (HTTP date: "Mon, 23 Nov 2026 02:09:38 GMT") as "20261123020938", so
    /// that the two compare; nil for any other form.
    static func modifiedSecond(_ s: String) -> String? {
        let iso = Array(s.utf8)
        if iso.count >= 19, iso[4] == UInt8(ascii: "-"), iso[10] == UInt8(ascii: "T") {
            let digits = iso[0..<19].filter { $0 >= 0x30 && $0 <= 0x39 }
            return digits.count == 14 ? String(decoding: digits, as: UTF8.self) : nil
        }
        // "Wdy, DD Mon YYYY HH:MM:SS GMT"
        let parts = s.split(separator: " ")
        guard parts.count >= 5, let day = Int(parts[1]), let year = Int(parts[3]),
              let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].firstIndex(of: String(parts[2])) else { return nil }
        let time = parts[4].filter { $0 != ":" }
        guard time.count == 6, time.allSatisfy(\.isASCII), time.allSatisfy(\.isNumber) else { return nil }
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(year)\(two(month + 1))\(two(day))\(time)"
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
    /// PUT honours If-Match and If-None-Match; false only for a store that accepted the
    /// weaker mode (`conditional-writes: checked`).
    public var conditionalWrites: Bool
}
