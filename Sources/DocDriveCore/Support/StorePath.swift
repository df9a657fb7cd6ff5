// StorePath: a path inside a store as the bytes the file system holds, so that a name that is not
// valid UTF-8 reaches the remote byte for byte (a Swift String cannot hold such a name).

/// "a/b/c.txt" inside a store, as bytes ("" for the store itself). Built from what the kernel
/// gave (a FUSE name, a readlink of /proc, a readdir entry), never decoded on the way.
public struct StorePath: Hashable, Sendable, Comparable, ExpressibleByStringInterpolation, CustomStringConvertible {
    public private(set) var bytes: [UInt8]

    public init(bytes: [UInt8]) { self.bytes = bytes }
    public init(_ string: String) { self.bytes = Array(string.utf8) }
    public init(stringLiteral value: String) { self.init(value) }

    public static let store = StorePath(bytes: [])

    public var isEmpty: Bool { bytes.isEmpty }

    /// The names from the top down.
    public var names: [ArraySlice<UInt8>] {
        bytes.isEmpty ? [] : bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
    }

    /// The last name, or the whole path when it has one name.
    public var lastName: ArraySlice<UInt8> { names.last ?? [] }

    /// The folder it is in ("" for a name at the top of the store).
    public var folder: StorePath {
        guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return .store }
        return StorePath(bytes: Array(bytes[..<slash]))
    }

    public func appending<C: Collection>(_ name: C) -> StorePath where C.Element == UInt8 {
        var b = bytes
        b.reserveCapacity(b.count + name.count + 1)
        if !b.isEmpty { b.append(UInt8(ascii: "/")) }
        b.append(contentsOf: name)
        return StorePath(bytes: b)
    }

    public func appending(_ name: String) -> StorePath { appending(Array(name.utf8)) }

    /// The path as text when it is valid UTF-8 (nearly always), else nil.
    public var string: String? { String(validating: bytes, as: UTF8.self) }

    /// For messages and logs: the text, with each byte that is not part of valid UTF-8 written
    /// as \xNN (so the sentence names the file unambiguously without being invalid itself).
    public var description: String {
        if let s = string { return s }
        var out = ""
        var i = 0
        while i < bytes.count {
            let len = Self.sequenceLength(bytes, at: i)
            if len > 0, let s = String(validating: bytes[i..<i + len], as: UTF8.self) {
                out += s
                i += len
            } else {
                out += "\\x" + String(bytes[i], radix: 16, uppercase: true).leftPadded(to: 2)
                i += 1
            }
        }
        return out
    }

    /// The length of the UTF-8 sequence a lead byte announces, if that many bytes follow.
    private static func sequenceLength(_ b: [UInt8], at i: Int) -> Int {
        let lead = b[i]
        let len = lead < 0x80 ? 1 : lead >> 5 == 0b110 ? 2 : lead >> 4 == 0b1110 ? 3 : lead >> 3 == 0b11110 ? 4 : 0
        return i + len <= b.count ? len : 0
    }

    public static func < (a: StorePath, b: StorePath) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }

    /// Why the path cannot be a path on a remote (empty names, ".", "..", names longer than
    /// 255 bytes, NUL); nil when every name is fine. Length is not limited: a store may hold
    /// paths longer than PATH_MAX, and every remote path is opened one name at a time.
    public var problem: String? {
        if bytes.isEmpty { return "it is empty" }
        if bytes.contains(0) { return "it contains a NUL byte" }
        for name in names {
            if name.isEmpty { return "it has an empty name in it" }
            if name.count > Names.maxNameBytes { return "a name in it is longer than \(Names.maxNameBytes) bytes" }
            if name.elementsEqual([UInt8(ascii: ".")]) || name.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                return "it has \".\" or \"..\" in it"
            }
        }
        return nil
    }
}

extension String {
    fileprivate func leftPadded(to n: Int) -> String { count >= n ? self : String(repeating: "0", count: n - count) + self }
}
