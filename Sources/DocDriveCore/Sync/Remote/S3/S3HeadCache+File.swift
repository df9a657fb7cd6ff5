// S3HeadCache+File: the HEAD answers kept across a restart, in a file of the store's own folder,
// so that the first listing after a start looks up only what changed meanwhile (a store of
// 100,000 objects made 100,000 HEADs at every start, and its mount waited for them).
import Crypto
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// The file: "DDS3HEADS 1\n", the remote's identity (a string: endpoint, bucket, prefix), then
/// one record per answer, then a 0 byte and the number of records, then the SHA-256 of all that
/// (a damaged file is found whole, not only where its lengths stop making sense). An answer is
/// used only for the key, ETag and second a listing shows (`S3Remote.cachedHead`), so an old
/// file is safe; a file of another remote (the identity differs), or one that does not read
/// whole, is ignored. Integers are little-endian; a string is its length (UInt32) and its
/// bytes, `UInt32.max` for none.
extension S3HeadCache {
    static let fileMagic = Array("DDS3HEADS 1\n".utf8)
    /// No string of an answer is longer (S3 keys: 1,024 bytes; metadata: 2 KiB in all).
    static let longestString = 64 << 10

    /// Writes the answers to `path` (a temporary file renamed over it, synced first) when they
    /// changed since they were last written or read; returns how many were written, nil when
    /// nothing changed. Throws the failed call's errno.
    @discardableResult
    package func write(to path: String, identity: String) throws(Errno) -> Int? {
        // One write at a time (the stop's and a long poll's may meet): both use `path.new`.
        try writing.withLock { _ in Result { () throws(Errno) in try writeAlone(to: path, identity: identity) } }.get()
    }

    private func writeAlone(to path: String, identity: String) throws(Errno) -> Int? {
        let now = changes.load(ordering: .relaxed)
        guard now != written.load(ordering: .relaxed) else { return nil }
        let (all, shared) = snapshot()
        let temporary = path + ".new"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Errno(rawValue: errno) }
        var ok = false
        defer {
            close(fd)
            if !ok { unlink(temporary) }
        }
        var out = [UInt8]()
        out.reserveCapacity(1 << 20)
        var digest = SHA256()
        func flush() throws(Errno) {
            digest.update(data: out)
            do { _ = try FileDescriptor(rawValue: fd).writeAll(out) } catch { throw error as? Errno ?? Errno.ioError }
            out.removeAll(keepingCapacity: true)
        }
        out += Self.fileMagic
        Self.put(identity, &out)
        for answer in all {
            let h = answer.withPacked { HeadPacking.unpack($0, shared: shared) }
            out.append(1)
            Self.put(bytes: answer.key, &out)
            Self.put(h.etag, &out)
            Self.put(UInt64(bitPattern: h.size), &out)
            out.append(h.link ? 1 : 0)
            for s in [h.upload, h.modified, h.answered, h.meta.itemID, h.meta.deviceID, h.meta.deviceName, h.meta.origin, h.meta.parent] {
                Self.put(s, &out)
            }
            out.append(h.meta.mtimeNanoseconds == nil ? 0 : 1)
            Self.put(UInt64(bitPattern: h.meta.mtimeNanoseconds ?? 0), &out)
            out.append(h.meta.mode == nil ? 0 : 1)
            Self.put(UInt64(h.meta.mode ?? 0), &out)
            if out.count >= 1 << 20 { try flush() }
        }
        out.append(0)
        Self.put(UInt64(all.count), &out)
        try flush()
        out = Array(digest.finalize())
        try flush()
        guard fsync(fd) == 0 else { throw Errno(rawValue: errno) }
        guard rename(temporary, path) == 0 else { throw Errno(rawValue: errno) }
        ok = true
        written.store(now, ordering: .relaxed)
        return all.count
    }

    /// Keeps the answers of the file at `path` if it is the file of this remote (`identity`)
    /// and reads whole; returns how many, nil when there is no such file. Throws a sentence for
    /// a file that is there and cannot be used (nothing of it is kept then).
    package func read(from path: String, identity: String) throws(RemoteError) -> Int? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw RemoteError.io("cannot read the S3 answers kept in \(path)", Errno(rawValue: errno))
        }
        defer { close(fd) }
        var st = stat()
        let notOurs = RemoteError(.io, "\(path) is not a file of kept S3 answers; it is ignored.")
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_size >= Self.fileMagic.count + 32, st.st_size <= 1 << 32 else { throw notOurs }
        var data = [UInt8](repeating: 0, count: Int(st.st_size))
        var got = 0
        while got < data.count {
            let n = data.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + got, $0.count - got) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw RemoteError.io("cannot read the S3 answers kept in \(path)", Errno(rawValue: errno)) }
            guard n > 0 else { break }
            got += n
        }
        guard got == data.count else { throw RemoteError(.io, "\(path) could not be read whole; it is ignored.") }
        guard data.prefix(Self.fileMagic.count).elementsEqual(Self.fileMagic) else { throw notOurs }
        let body = data.count - 32
        guard SHA256.hash(data: data[..<body]).elementsEqual(data[body...]) else {
            throw RemoteError(.io, "\(path) is damaged (its checksum differs); it is ignored.")
        }
        data.removeLast(32)
        var r = Reader(data: data)
        _ = r.bytes(Self.fileMagic.count)
        guard r.string() == identity else { return 0 }  // another remote's: of no use here
        var answers = [([UInt8], S3Remote.Head)]()
        while let tag = r.byte(), tag == 1 {
            guard let key = r.optionalBytes() ?? nil, let etag = r.string(), let size = r.u64(), let link = r.byte(),
                  let upload = r.optionalString(), let modified = r.optionalString(), let answered = r.optionalString(),
                  let itemID = r.optionalString(), let deviceID = r.optionalString(), let deviceName = r.optionalString(),
                  let origin = r.optionalString(), let parent = r.optionalString(),
                  let hasTime = r.byte(), let time = r.u64(), let hasMode = r.byte(), let mode = r.u64(), mode <= UInt32.max
            else { throw RemoteError(.io, "\(path) is cut short or damaged; it is ignored.") }
            let meta = RemoteMeta(itemID: itemID, deviceID: deviceID, deviceName: deviceName,
                                  mtimeNanoseconds: hasTime == 1 ? Int64(bitPattern: time) : nil,
                                  mode: hasMode == 1 ? UInt32(mode) : nil, origin: origin, parent: parent)
            answers.append((key, S3Remote.Head(etag: etag, size: Int64(bitPattern: size), meta: meta, link: link == 1,
                                               upload: upload, modified: modified, answered: answered)))
        }
        guard r.last == 0, r.u64() == UInt64(answers.count), r.atEnd else {
            throw RemoteError(.io, "\(path) is cut short or damaged; it is ignored.")
        }
        for (key, head) in answers { keep(head, for: String(decoding: key, as: UTF8.self)) }
        written.store(changes.load(ordering: .relaxed), ordering: .relaxed)
        return answers.count
    }

    private static func put(_ v: UInt64, _ out: inout [UInt8]) {
        withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) }
    }

    private static func put(bytes: [UInt8], _ out: inout [UInt8]) {
        put(UInt32(bytes.count), &out)
        out += bytes
    }

    private static func put(_ s: String?, _ out: inout [UInt8]) {
        guard let s else { return put(UInt32.max, &out) }
        put(UInt32(s.utf8.count), &out)
        out.append(contentsOf: s.utf8)
    }

    private static func put(_ v: UInt32, _ out: inout [UInt8]) {
        withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) }
    }

    /// Reads the file's fields; every read is checked against the end (nil past it).
    private struct Reader {
        let data: [UInt8]
        var at = 0
        /// The last byte read by `byte()`.
        var last: UInt8?

        init(data: [UInt8]) { self.data = data }

        var atEnd: Bool { at == data.count }

        mutating func bytes(_ n: Int) -> [UInt8]? {
            guard n >= 0, n <= data.count - at else { return nil }
            defer { at += n }
            return Array(data[at..<at + n])
        }

        mutating func byte() -> UInt8? {
            guard at < data.count else { last = nil; return nil }
            defer { at += 1 }
            last = data[at]
            return data[at]
        }

        mutating func u32() -> UInt32? {
            guard let b = bytes(4) else { return nil }
            return b.reversed().reduce(0) { $0 << 8 | UInt32($1) }
        }

        mutating func u64() -> UInt64? {
            guard let b = bytes(8) else { return nil }
            return b.reversed().reduce(0) { $0 << 8 | UInt64($1) }
        }

        /// nil: past the end or too long; .some(nil): none was written.
        mutating func optionalBytes() -> [UInt8]?? {
            guard let n = u32() else { return nil }
            if n == UInt32.max { return .some(nil) }
            guard n <= S3HeadCache.longestString else { return nil }
            return bytes(Int(n)).map { .some($0) }
        }

        mutating func optionalString() -> String?? {
            guard let b = optionalBytes() else { return nil }
            return .some(b.map { String(decoding: $0, as: UTF8.self) })
        }

        mutating func string() -> String? {
            guard let s = optionalString() else { return nil }
            return s
        }
    }
}
