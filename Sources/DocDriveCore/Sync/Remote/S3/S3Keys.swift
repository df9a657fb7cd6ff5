// S3Keys: how a store path becomes an object key and back (a reversible encoding for the rare
// names S3 cannot hold as they are), and how RemoteMeta travels as x-amz-meta-* headers.
import Foundation

/// The mapping between store paths and keys of one store (`prefix/` + path).
///
/// A key is the path itself, name by name, except for a name that
///  * is not valid UTF-8 (a key is UTF-8 text),
///  * holds a control character (U+0000–U+001F, U+007F: XML 1.0, which listings are written
///    in, cannot carry most of them, and many tools mangle them),
///  * starts with `~dd~` (the escape's own mark), or
///  * is at the top of the store and starts with `.docdrive` (the store's own objects live
///    there: `.docdrive-store`, `.docdrive/`).
/// Such a name is written `~dd~` followed by the name with every byte of those kinds, and
/// every `%`, as `%XX` (upper-case hex). Decoding: a name that starts with `~dd~` loses the
/// mark and has its `%XX` decoded; every other name is taken as it is. So
/// `caf\xE9.txt` (Latin-1) is `~dd~caf%E9.txt`, and `100%.txt` stays `100%.txt`.
public struct S3Keys: Sendable {
    /// The store's folder in the bucket, without slashes at either end ("" for the bucket).
    public let prefix: String

    public static let escapeMark = "~dd~"
    /// The store's own objects, under the prefix: the marker `store add` writes, and the folder
    /// of the records of unfinished multipart uploads and probes.
    public static let markerName = ".docdrive-store"
    public static let ownFolder = ".docdrive"
    /// S3's limit on a key, in UTF-8 bytes.
    public static let maxKeyBytes = 1024

    public init(prefix: String) {
        self.prefix = prefix.split(separator: "/", omittingEmptySubsequences: true).joined(separator: "/")
    }

    /// "prefix/" (or "" for a whole bucket): what every key of the store starts with.
    public var keyPrefix: String { prefix.isEmpty ? "" : prefix + "/" }

    /// The key of a store path (a folder marker adds "/"); throws a sentence for a path no key
    /// can hold.
    public func key(_ path: StorePath, folder: Bool = false) throws(RemoteError) -> String {
        if let p = path.problem {
            throw RemoteError(.invalidName, "The path \(path) cannot be stored: \(p).")
        }
        var key = keyPrefix
        for (i, name) in path.names.enumerated() {
            if i > 0 { key += "/" }
            key += Self.encodeName(name, top: i == 0)
        }
        if folder { key += "/" }
        if key.utf8.count > Self.maxKeyBytes {
            throw RemoteError(.invalidName, "The path \(path) is too long for S3 (its key would be \(key.utf8.count) bytes; S3 allows \(Self.maxKeyBytes)).")
        }
        return key
    }

    /// The key of one of the store's own objects (`.docdrive/...`, the marker).
    public func ownKey(_ rest: String) -> String { keyPrefix + rest }

    /// The store path of a key of the store, and whether it names a folder (ends with "/");
    /// nil for a key outside the prefix, the store's own objects, keys that are no path
    /// (empty names, "." or ".."), and keys that are `unshown`.
    public func path(ofKey key: String) -> (path: StorePath, folder: Bool)? {
        if case .path(let p, let folder) = parse(key) { return (p, folder) }
        return nil
    }

    /// Whether `key` is of the store but shown nowhere: another tool's object with a name as it
    /// is that this encoding writes escaped (a tab or a line feed in it, say). Shown, it would
    /// open, save and delete another key (`~dd~tab%09name`), so it is left as it is, unshown.
    public func isUnshown(_ key: String) -> Bool {
        if case .unshown = parse(key) { return true }
        return false
    }

    private enum Parsed { case path(StorePath, Bool), none, unshown }

    private func parse(_ key: String) -> Parsed {
        // Bytes, not Characters: a name may start with a combining mark, which a String would
        // join to the "/" or "~" before it.
        let k = Array(key.utf8)
        let p = Array(keyPrefix.utf8)
        guard k.starts(with: p) else { return .none }
        var rest = k[p.count...]
        var folder = false
        if rest.last == UInt8(ascii: "/") {
            folder = true
            rest = rest.dropLast()
        }
        if rest.isEmpty { return .none }
        var bytes = [UInt8]()
        var unshown = false
        for (i, name) in rest.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).enumerated() {
            if i == 0 && name.starts(with: Self.ownFolder.utf8) { return .none }  // .docdrive-store, .docdrive/
            guard let decoded = Self.decodeName(name) else { return .none }
            // A name taken as it is must be one this encoding writes as it is.
            if !name.starts(with: Self.escapeMark.utf8), Self.needsEscape(name, top: i == 0) { unshown = true }
            if i > 0 { bytes.append(UInt8(ascii: "/")) }
            bytes += decoded
        }
        let path = StorePath(bytes: bytes)
        guard path.problem == nil else { return .none }
        return unshown ? .unshown : .path(path, folder)
    }

    static func needsEscape(_ name: ArraySlice<UInt8>, top: Bool) -> Bool {
        if name.contains(where: { $0 < 0x20 || $0 == 0x7F }) { return true }
        if name.starts(with: escapeMark.utf8) { return true }
        if top && name.starts(with: ownFolder.utf8) { return true }
        return String(validating: name, as: UTF8.self) == nil
    }

    static func encodeName(_ name: ArraySlice<UInt8>, top: Bool) -> String {
        guard needsEscape(name, top: top) else { return String(decoding: name, as: UTF8.self) }
        // Keep the valid UTF-8 runs as they are; escape the rest byte by byte.
        var out = escapeMark
        var i = name.startIndex
        while i < name.endIndex {
            let b = name[i]
            let len = b < 0x80 ? 1 : b >> 5 == 0b110 ? 2 : b >> 4 == 0b1110 ? 3 : b >> 3 == 0b11110 ? 4 : 0
            if len > 1, i + len <= name.endIndex, let s = String(validating: name[i..<i + len], as: UTF8.self) {
                out += s
                i += len
                continue
            }
            if b < 0x20 || b == 0x7F || b >= 0x80 || b == UInt8(ascii: "%") {
                out += String(format: "%%%02X", b)
            } else {
                out.unicodeScalars.append(Unicode.Scalar(b))
            }
            i += 1
        }
        return out
    }

    static func decodeName(_ name: ArraySlice<UInt8>) -> [UInt8]? {
        guard name.starts(with: escapeMark.utf8) else { return Array(name) }
        let u = Array(name.dropFirst(escapeMark.utf8.count))
        var out = [UInt8]()
        var i = 0
        while i < u.count {
            if u[i] == UInt8(ascii: "%") {
                guard i + 2 < u.count, let v = UInt8(String(decoding: u[i + 1...i + 2], as: UTF8.self), radix: 16) else { return nil }
                out.append(v)
                i += 3
            } else {
                out.append(u[i])
                i += 1
            }
        }
        return out
    }
}

/// RemoteMeta as user metadata. Names (each `x-amz-meta-` + this):
///  * `docdrive-id`: the item id; `docdrive-device`: the writing device's id;
///  * `docdrive-device-name`: its name, percent-encoded (UTF-8) beyond printable ASCII;
///  * `docdrive-mtime`: nanoseconds since 1970; `docdrive-mode`: permission bits in octal;
///  * `docdrive-link: 1` on a symbolic link (its body is the target);
///  * `docdrive-upload`: a random token per upload, so a retried create can tell its own
///    earlier success from another device's object;
///  * `mtime`: seconds since 1970 with a fraction, as rclone writes and reads it.
public enum S3Meta {
    static let header = "x-amz-meta-"
    static let id = "docdrive-id"
    static let device = "docdrive-device"
    static let deviceName = "docdrive-device-name"
    static let mtime = "docdrive-mtime"
    static let mode = "docdrive-mode"
    static let link = "docdrive-link"
    static let upload = "docdrive-upload"
    static let origin = "docdrive-origin"
    static let parent = "docdrive-parent"
    static let rcloneMtime = "mtime"

    /// Whether the header `name` is one of DocDrive's own metadata fields (rclone's mtime
    /// included, which DocDrive writes beside its own).
    static func isOwn(_ name: String) -> Bool {
        let n = name.lowercased()
        guard n.hasPrefix(header) else { return false }
        let field = n.dropFirst(header.count)
        return field.hasPrefix("docdrive-") || field == rcloneMtime
    }

    /// The headers to send with a write.
    public static func headers(_ meta: RemoteMeta, link: Bool = false, upload: String? = nil) -> [(String, String)] {
        var h = [(String, String)]()
        if let v = meta.itemID { h.append((header + id, percentEncoded(v))) }
        if let v = meta.deviceID { h.append((header + device, percentEncoded(v))) }
        if let v = meta.deviceName { h.append((header + deviceName, percentEncoded(v))) }
        if let v = meta.mtimeNanoseconds {
            h.append((header + mtime, String(v)))
            h.append((header + rcloneMtime, Timestamp.decimalSeconds(v)))
        }
        if let v = meta.mode { h.append((header + mode, String(v, radix: 8))) }
        if let v = meta.origin { h.append((header + origin, percentEncoded(v))) }
        if let v = meta.parent { h.append((header + parent, percentEncoded(v))) }
        if link { h.append((header + self.link, "1")) }
        if let upload { h.append((header + self.upload, upload)) }
        return h
    }

    /// The metadata an object's headers carry (as HEAD or GET return them).
    public static func meta(_ headers: [(String, String)]) -> (meta: RemoteMeta, link: Bool, upload: String?) {
        var m = RemoteMeta()
        var link = false
        var upload: String?
        var rclone: Int64?
        for (name, value) in headers {
            let n = name.lowercased()
            guard n.hasPrefix(header) else { continue }
            switch String(n.dropFirst(header.count)) {
            case id: m.itemID = value.removingPercentEncoding ?? value
            case device: m.deviceID = value.removingPercentEncoding ?? value
            case deviceName: m.deviceName = value.removingPercentEncoding ?? value
            case mtime: m.mtimeNanoseconds = Int64(value)
            case mode: m.mode = UInt32(value, radix: 8)
            case origin: m.origin = value.removingPercentEncoding ?? value
            case parent: m.parent = value.removingPercentEncoding ?? value
            case self.link: link = value == "1"
            case self.upload: upload = value
            case rcloneMtime:
                rclone = Timestamp.nanoseconds(decimalSeconds: value)
            default: break
            }
        }
        if m.mtimeNanoseconds == nil { m.mtimeNanoseconds = rclone }
        return (m, link, upload)
    }

    /// Printable ASCII stays; everything else (and `%`) is %XX of its UTF-8 bytes.
    static func percentEncoded(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            if b >= 0x20 && b < 0x7F && b != UInt8(ascii: "%") {
                out.unicodeScalars.append(Unicode.Scalar(b))
            } else {
                out += String(format: "%%%02X", b)
            }
        }
        return out
    }
}
