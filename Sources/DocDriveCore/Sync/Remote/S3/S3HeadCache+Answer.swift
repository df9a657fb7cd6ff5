// S3HeadCache+Answer: one kept HEAD answer and its key, packed into one allocation.
#if canImport(Glibc)
import Glibc
#endif

extension S3HeadCache {
    struct AnswerHeader {
        /// The key's hash (`S3HeadCache.hash`), read by the table at every probe.
        let hash: UInt64
        /// How many of the bytes are the key's; the packed answer follows them.
        let keyLength: Int32
        let length: Int32
    }

    /// The key's bytes, then the answer packed (`HeadPacking`): 112 bytes an answer in all for
    /// `joinbench`'s objects, where the answer as a `Head` in an object of its own, its ETag and
    /// item id as strings and its key as an array took about 450 (heaptrack of a store of 100,000
    /// objects: the largest part of what the store kept between polls). Never changed once made.
    final class Answer: ManagedBuffer<AnswerHeader, UInt8> {
        static func make(key: some Collection<UInt8>, packed: [UInt8], hash: UInt64) -> Answer {
            let n = key.count + packed.count
            let made = Answer.create(minimumCapacity: n) { _ in
                AnswerHeader(hash: hash, keyLength: Int32(key.count), length: Int32(n))
            }
            made.withUnsafeMutablePointerToElements { p in
                let afterKey = UnsafeMutableBufferPointer(start: p, count: n).initialize(fromContentsOf: key)
                packed.withUnsafeBufferPointer { src in
                    (p + afterKey).initialize(from: src.baseAddress!, count: src.count)
                }
            }
            return unsafeDowncast(made, to: Answer.self)
        }

        func keyEquals(_ key: UnsafeBufferPointer<UInt8>) -> Bool {
            let h = header
            guard Int(h.keyLength) == key.count else { return false }
            guard let base = key.baseAddress, key.count > 0 else { return true }
            return withUnsafeMutablePointerToElements { p in memcmp(p, base, key.count) == 0 }
        }

        var key: [UInt8] {
            let h = header
            return withUnsafeMutablePointerToElements { p in Array(UnsafeBufferPointer(start: p, count: Int(h.keyLength))) }
        }

        /// The packed answer's bytes, for `body`.
        func withPacked<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
            let h = header
            return withUnsafeMutablePointerToElements { p in
                body(UnsafeBufferPointer(start: p + Int(h.keyLength), count: Int(h.length - h.keyLength)))
            }
        }
    }

    /// The table's element: the answer itself (8 bytes a bucket). Sendable: an answer is never
    /// changed once made (a `ManagedBuffer` cannot say so itself).
    struct Kept: ProbedElement, @unchecked Sendable {
        let answer: Answer
        var probeHash: UInt64 { answer.header.hash }
    }

    static func hash(_ key: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var h = Hasher()
        h.combine(bytes: UnsafeRawBufferPointer(key))
        return UInt64(UInt(bitPattern: h.finalize()))
    }
}

/// Packs a `Head` into bytes and back, exactly: every string comes back equal, and a missing
/// field stays missing. A string of a form the drive and S3 write most is kept in its value's
/// bytes: 32 lower-case hex digits (an MD5 ETag, a parent) in 16, a UUID in the drive's form (an
/// item id) in 16, 14 digits (a second, "YYYYMMDDHHMMSS") in 7; any other as its length and bytes.
enum HeadPacking {
    private enum Form: UInt8 { case none = 0, hex32, uuid, second, shared, raw }

    private static let link: UInt8 = 1, hasTime: UInt8 = 2, hasMode: UInt8 = 4

    static func pack(_ h: S3Remote.Head, shared: inout SharedStrings) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(128)
        var flags: UInt8 = h.link ? link : 0
        if h.meta.mtimeNanoseconds != nil { flags |= hasTime }
        if h.meta.mode != nil { flags |= hasMode }
        out.append(flags)
        put(UInt64(bitPattern: h.size), &out)
        put(string: h.etag, &out)
        for s in [h.upload, h.modified, h.answered, h.meta.itemID, h.meta.origin, h.meta.parent] { put(string: s, &out) }
        for s in [h.meta.deviceID, h.meta.deviceName] {
            if let s, let n = shared.number(of: s) {
                out.append(Form.shared.rawValue)
                put(UInt64(n), &out)
            } else {
                put(string: s, &out)
            }
        }
        if let t = h.meta.mtimeNanoseconds { withUnsafeBytes(of: t.littleEndian) { out.append(contentsOf: $0) } }
        if let m = h.meta.mode { put(UInt64(m), &out) }
        return out
    }

    /// The answer packed in `b`, its ETag `etag` when the caller has that string already (one
    /// string for both). `shared`: the strings the answer was packed with, or more.
    static func unpack(_ b: UnsafeBufferPointer<UInt8>, shared: [String], etag known: String? = nil) -> S3Remote.Head {
        var r = Reader(b: b, shared: shared)
        let flags = r.byte()
        let size = Int64(bitPattern: r.varint())
        let etag = r.string(known: known) ?? ""
        let upload = r.string(), modified = r.string(), answered = r.string()
        let itemID = r.string(), origin = r.string(), parent = r.string()
        let deviceID = r.string(), deviceName = r.string()
        var time: Int64?
        if flags & hasTime != 0 {
            var v: UInt64 = 0
            for i in 0..<8 { v |= UInt64(r.byte()) << (8 * UInt64(i)) }
            time = Int64(bitPattern: v)
        }
        let mode = flags & hasMode != 0 ? UInt32(truncatingIfNeeded: r.varint()) : nil
        let meta = RemoteMeta(itemID: itemID, deviceID: deviceID, deviceName: deviceName,
                              mtimeNanoseconds: time, mode: mode, origin: origin, parent: parent)
        return S3Remote.Head(etag: etag, size: size, meta: meta, link: flags & link != 0,
                             upload: upload, modified: modified, answered: answered)
    }

    /// Whether the answer packed in `b` has the ETag `etag`, without unpacking it.
    static func hasETag(_ b: UnsafeBufferPointer<UInt8>, _ etag: String) -> Bool {
        var r = Reader(b: b, shared: [])
        _ = r.byte()
        _ = r.varint()
        var packed = [UInt8]()
        put(string: etag, &packed)
        let start = r.at
        r.skipString()
        return r.at - start == packed.count && packed.withUnsafeBufferPointer { p in
            memcmp(b.baseAddress! + start, p.baseAddress!, p.count) == 0
        }
    }

    // MARK: Writing

    private static func put(_ v: UInt64, _ out: inout [UInt8]) {
        var v = v
        while v >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }

    private static func put(string s: String?, _ out: inout [UInt8]) {
        guard var s else { return out.append(Form.none.rawValue) }
        s.makeContiguousUTF8()
        s.utf8.withContiguousStorageIfAvailable { b in
            if b.count == 32, let v = hexValue(b) {
                out.append(Form.hex32.rawValue)
                out.append(contentsOf: v)
            } else if let u = UUIDBytes(s) {
                out.append(Form.uuid.rawValue)
                withUnsafeBytes(of: u.high.bigEndian) { out.append(contentsOf: $0) }
                withUnsafeBytes(of: u.low.bigEndian) { out.append(contentsOf: $0) }
            } else if b.count == 14, b.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
                out.append(Form.second.rawValue)
                for i in stride(from: 0, to: 14, by: 2) { out.append((b[i] - 0x30) << 4 | (b[i + 1] - 0x30)) }
            } else {
                out.append(Form.raw.rawValue)
                put(UInt64(b.count), &out)
                out.append(contentsOf: b)
            }
        }!
    }

    /// The 16 bytes of 32 lower-case hex digits; nil for any other byte.
    private static func hexValue(_ b: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var v = [UInt8](repeating: 0, count: 16)
        for i in 0..<16 {
            guard let hi = Hex.value(b[2 * i]), let lo = Hex.value(b[2 * i + 1]) else { return nil }
            v[i] = hi << 4 | lo
        }
        return v
    }

    // MARK: Reading (bytes this file wrote, in memory: trusted)

    private struct Reader {
        let b: UnsafeBufferPointer<UInt8>
        let shared: [String]
        var at = 0

        mutating func byte() -> UInt8 {
            defer { at += 1 }
            return b[at]
        }

        mutating func varint() -> UInt64 {
            var v: UInt64 = 0, shift: UInt64 = 0
            while true {
                let c = byte()
                v |= UInt64(c & 0x7F) << shift
                if c < 0x80 { return v }
                shift += 7
            }
        }

        mutating func skipString() {
            switch Form(rawValue: byte())! {
            case .none: break
            case .hex32, .uuid: at += 16
            case .second: at += 7
            case .shared: _ = varint()
            case .raw: at += Int(varint())
            }
        }

        /// The next string; `known` is returned in place of an equal one unpacked.
        mutating func string(known: String? = nil) -> String? {
            let form = Form(rawValue: b[at])!
            if let known, form != .none {
                skipString()
                return known
            }
            at += 1
            switch form {
            case .none: return nil
            case .hex32: return text(hexOf: 16, dashes: false)
            case .uuid: return text(hexOf: 16, dashes: true)
            case .second:
                defer { at += 7 }
                return String(unsafeUninitializedCapacity: 14) { out in
                    for i in 0..<7 {
                        out[2 * i] = 0x30 + b[at + i] >> 4
                        out[2 * i + 1] = 0x30 + b[at + i] & 0x0F
                    }
                    return 14
                }
            case .shared: return shared[Int(varint())]
            case .raw:
                let n = Int(varint())
                defer { at += n }
                return String(decoding: UnsafeBufferPointer(rebasing: b[at..<at + n]), as: UTF8.self)
            }
        }

        private mutating func text(hexOf n: Int, dashes: Bool) -> String {
            defer { at += n }
            return String(unsafeUninitializedCapacity: dashes ? 36 : 32) { out in
                var o = 0
                for i in 0..<n {
                    if dashes, i == 4 || i == 6 || i == 8 || i == 10 {
                        out[o] = UInt8(ascii: "-")
                        o += 1
                    }
                    out[o] = Hex.digits[Int(b[at + i] >> 4)]
                    out[o + 1] = Hex.digits[Int(b[at + i] & 0x0F)]
                    o += 2
                }
                return o
            }
        }
    }
}
