// RemoteMeta+JSON: an item's metadata as the folder remote keeps it (JSON in an extended
// attribute), read and written without Foundation's coders for the one form they write.
//
// A poll reads the metadata of every item of the store: in a `perf` of the polls of a 30,000-item
// folder store, JSONDecoder was 24 % of the daemon's samples (the getxattr another 23 %). The
// reader here takes one object whose keys are RemoteMeta's, each once, with strings, integers and
// nulls for values. Anything else (a key another version added, a number with a fraction or an
// exponent, a key twice, a lone surrogate, text that is not JSON) goes to JSONDecoder, so what is
// read is what JSONDecoder reads (`RemoteMetaJSONTests` holds the two side by side).
import Foundation

extension RemoteMeta {
    /// The metadata in `json`, as JSONDecoder reads it; nil where JSONDecoder fails.
    package static func decodingJSON(_ json: UnsafeRawBufferPointer) -> RemoteMeta? {
        if let m = MetaJSONReader.read(json) { return m }
        return try? JSONDecoder().decode(RemoteMeta.self, from: Data(json))
    }

    /// The reader alone: nil for what it leaves to JSONDecoder (for the tests).
    package static func decodingCommonJSON(_ json: UnsafeRawBufferPointer) -> RemoteMeta? {
        MetaJSONReader.read(json)
    }

    /// The metadata as one JSON object (the keys present, in declaration order), which
    /// JSONDecoder reads back equal.
    package var jsonBytes: [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(256)
        out.append(UInt8(ascii: "{"))
        func key(_ k: MetaJSONField) {
            if out.count > 1 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "\""))
            out.append(contentsOf: k.name)
            out.append(contentsOf: "\":".utf8)
        }
        func string(_ k: MetaJSONField, _ v: String?) {
            guard let v else { return }
            key(k)
            Self.appendQuoted(v, to: &out)
        }
        func number<T: BinaryInteger>(_ k: MetaJSONField, _ v: T?) {
            guard let v else { return }
            key(k)
            out.append(contentsOf: String(v).utf8)
        }
        string(.itemID, itemID)
        string(.deviceID, deviceID)
        string(.deviceName, deviceName)
        number(.mtimeNanoseconds, mtimeNanoseconds)
        number(.mode, mode)
        string(.origin, origin)
        string(.parent, parent)
        out.append(UInt8(ascii: "}"))
        return out
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    private static func appendQuoted(_ s: String, to out: inout [UInt8]) {
        let hex = hexDigits
        out.append(UInt8(ascii: "\""))
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), b])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), b])
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                out.append(contentsOf: "\\u00".utf8)
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 0xF)])
            default: out.append(b)  // UTF-8 as it is (a String's bytes are valid UTF-8)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

/// RemoteMeta's keys, as the writer writes them and the reader knows them.
private enum MetaJSONField: Int, CaseIterable {
    case itemID, deviceID, deviceName, mtimeNanoseconds, mode, origin, parent

    init?(_ key: UnsafeRawBufferPointer) {
        // Compared as bytes: no String is made for a key.
        guard let f = MetaJSONField.allCases.first(where: { $0.name.elementsEqual(key) }) else { return nil }
        self = f
    }

    var name: String.UTF8View {
        switch self {
        case .itemID: return "itemID".utf8
        case .deviceID: return "deviceID".utf8
        case .deviceName: return "deviceName".utf8
        case .mtimeNanoseconds: return "mtimeNanoseconds".utf8
        case .mode: return "mode".utf8
        case .origin: return "origin".utf8
        case .parent: return "parent".utf8
        }
    }
}

/// Reads the common form of RemoteMeta's JSON, or gives up (nil) at the first thing outside it.
private struct MetaJSONReader {
    private let b: UnsafeRawBufferPointer
    private var i = 0

    private init(_ b: UnsafeRawBufferPointer) { self.b = b }

    static func read(_ json: UnsafeRawBufferPointer) -> RemoteMeta? {
        var r = MetaJSONReader(json)
        return r.object()
    }

    private mutating func object() -> RemoteMeta? {
        var meta = RemoteMeta()
        var seen = 0
        skipSpace()
        guard take(UInt8(ascii: "{")) else { return nil }
        skipSpace()
        if !take(UInt8(ascii: "}")) {
            while true {
                skipSpace()
                guard let field = key() else { return nil }
                guard seen & (1 << field.rawValue) == 0 else { return nil }  // a key twice
                seen |= 1 << field.rawValue
                skipSpace()
                guard take(UInt8(ascii: ":")) else { return nil }
                skipSpace()
                guard value(field, into: &meta) else { return nil }
                skipSpace()
                if take(UInt8(ascii: ",")) { continue }
                guard take(UInt8(ascii: "}")) else { return nil }
                break
            }
        }
        skipSpace()
        return i == b.count ? meta : nil
    }

    private mutating func value(_ field: MetaJSONField, into meta: inout RemoteMeta) -> Bool {
        if literalNull() { return true }  // decodeIfPresent reads a null as absent
        switch field {
        case .mtimeNanoseconds:
            guard let n = integer() else { return false }
            meta.mtimeNanoseconds = n
        case .mode:
            guard let n = integer(), let m = UInt32(exactly: n) else { return false }
            meta.mode = m
        case .itemID, .deviceID, .deviceName, .origin, .parent:
            guard let s = string() else { return false }
            switch field {
            case .itemID: meta.itemID = s
            case .deviceID: meta.deviceID = s
            case .deviceName: meta.deviceName = s
            case .origin: meta.origin = s
            default: meta.parent = s
            }
        }
        return true
    }

    private var next: UInt8? { i < b.count ? b[i] : nil }

    private mutating func take(_ c: UInt8) -> Bool {
        guard next == c else { return false }
        i += 1
        return true
    }

    private mutating func skipSpace() {
        while let c = next, c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 { i += 1 }
    }

    private mutating func literalNull() -> Bool {
        guard b.count - i >= 4, b[i] == UInt8(ascii: "n"), b[i + 1] == UInt8(ascii: "u"),
              b[i + 2] == UInt8(ascii: "l"), b[i + 3] == UInt8(ascii: "l") else { return false }
        i += 4
        return true
    }

    /// An integer without a fraction or an exponent (JSON's form: no leading zero, no plus).
    private mutating func integer() -> Int64? {
        let negative = take(UInt8(ascii: "-"))
        let start = i
        var n: Int64 = 0
        while let c = next, c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") {
            let d = Int64(c - UInt8(ascii: "0"))
            // Built negative, so that Int64.min fits.
            let (m, o1) = n.multipliedReportingOverflow(by: 10)
            let (s, o2) = m.subtractingReportingOverflow(d)
            guard !o1, !o2 else { return nil }
            n = s
            i += 1
        }
        let digits = i - start
        guard digits > 0, !(digits > 1 && b[start] == UInt8(ascii: "0")) else { return nil }
        if let c = next, c == UInt8(ascii: ".") || c == UInt8(ascii: "e") || c == UInt8(ascii: "E") { return nil }
        if negative { return n }
        guard n != Int64.min else { return nil }
        return -n
    }

    /// A key: its bytes as they stand when it has no escape (the usual case), else undone.
    private mutating func key() -> MetaJSONField? {
        if let plain = plainString() { return MetaJSONField(plain) }
        guard let bytes = quoted() else { return nil }
        return bytes.withUnsafeBytes { MetaJSONField($0) }
    }

    /// A string value.
    private mutating func string() -> String? {
        if let plain = plainString() { return String(validating: plain, as: UTF8.self) }
        guard let bytes = quoted() else { return nil }
        return String(validating: bytes, as: UTF8.self)
    }

    /// The bytes between the quotes of a string with no escape and no control character, read
    /// in place (nil, and nothing read, for any other string).
    private mutating func plainString() -> UnsafeRawBufferPointer? {
        guard next == UInt8(ascii: "\"") else { return nil }
        var j = i + 1
        while j < b.count {
            let c = b[j]
            if c == UInt8(ascii: "\"") {
                defer { i = j + 1 }
                return UnsafeRawBufferPointer(rebasing: b[(i + 1)..<j])
            }
            if c == UInt8(ascii: "\\") || c < 0x20 { return nil }
            j += 1
        }
        return nil
    }

    /// A string's bytes, its escapes undone (nil for a control character, a bad escape or a
    /// lone surrogate).
    private mutating func quoted() -> [UInt8]? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        var out = [UInt8]()
        while let c = next {
            i += 1
            switch c {
            case UInt8(ascii: "\""):
                return out
            case UInt8(ascii: "\\"):
                guard let e = next else { return nil }
                i += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    guard var u = hex4() else { return nil }
                    if u >= 0xD800 && u < 0xDC00 {
                        guard take(UInt8(ascii: "\\")), take(UInt8(ascii: "u")), let lo = hex4(), lo >= 0xDC00, lo < 0xE000 else { return nil }
                        u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00)
                    } else if u >= 0xDC00 && u < 0xE000 {
                        return nil
                    }
                    guard let scalar = Unicode.Scalar(u) else { return nil }
                    UTF8.encode(scalar) { out.append($0) }
                default:
                    return nil
                }
            case 0..<0x20:
                return nil
            default:
                out.append(c)
            }
        }
        return nil
    }

    private mutating func hex4() -> UInt32? {
        guard b.count - i >= 4 else { return nil }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = b[i]
            let d: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = c - UInt8(ascii: "A") + 10
            default: return nil
            }
            v = v << 4 | UInt32(d)
            i += 1
        }
        return v
    }
}
