// S3XML: reads the few flat XML documents S3 answers with (listings, errors, multipart
// replies) and escapes what goes into the one it is sent (CompleteMultipartUpload); no
// general XML parser. Works on bytes: a name may begin with a combining mark, which a String
// would join to the ">" before it.

/// A very small reader: S3's answers are element trees without attributes that matter,
/// comments or mixed content, so finding `<Name>text</Name>` in order is enough.
struct S3XML {
    let bytes: ArraySlice<UInt8>

    init(_ bytes: [UInt8]) { self.bytes = bytes[...] }
    init(_ bytes: ArraySlice<UInt8>) { self.bytes = bytes }

    private static let lt = UInt8(ascii: "<"), gt = UInt8(ascii: ">"), slash = UInt8(ascii: "/")

    /// The name of the root element ("Error", "ListBucketResult", ...).
    var rootName: String? {
        var i = bytes.startIndex
        while let lt = bytes[i...].firstIndex(of: Self.lt) {
            let next = lt + 1
            guard next < bytes.endIndex else { return nil }
            if bytes[next] == UInt8(ascii: "?") || bytes[next] == UInt8(ascii: "!") {
                guard let gt = bytes[next...].firstIndex(of: Self.gt) else { return nil }
                i = gt + 1
                continue
            }
            let end = bytes[next...].firstIndex(where: { $0 == Self.gt || $0 == UInt8(ascii: " ") || $0 == Self.slash || $0 == 10 || $0 == 13 || $0 == 9 })
                ?? bytes.endIndex
            return String(decoding: bytes[next..<end], as: UTF8.self)
        }
        return nil
    }

    /// Every `<name>...</name>` element's inner part, in order (not nested in one another).
    func elements(_ name: String) -> [S3XML] {
        var out = [S3XML]()
        let open = [Self.lt] + Array(name.utf8)
        let close = [Self.lt, Self.slash] + Array(name.utf8) + [Self.gt]
        var i = bytes.startIndex
        while let start = Self.find(open, in: bytes[i...]) {
            let after = start + open.count
            guard after < bytes.endIndex else { break }
            let c = bytes[after]
            guard c == Self.gt || c == UInt8(ascii: " ") || c == Self.slash else { i = after; continue }  // <NameOther>
            guard let gt = bytes[after...].firstIndex(of: Self.gt) else { break }
            if bytes[gt - 1] == Self.slash {  // <Name/>
                out.append(S3XML([]))
                i = gt + 1
                continue
            }
            guard let end = Self.find(close, in: bytes[(gt + 1)...]) else { break }
            out.append(S3XML(bytes[(gt + 1)..<end]))
            i = end + close.count
        }
        return out
    }

    /// The text of the first `<name>` element, entities decoded.
    func value(_ name: String) -> String? {
        elements(name).first.map { Self.unescape($0.bytes) }
    }

    private static func find(_ needle: [UInt8], in hay: ArraySlice<UInt8>) -> Int? {
        guard let first = needle.first, hay.count >= needle.count else { return nil }
        var i = hay.startIndex
        let last = hay.endIndex - needle.count
        while i <= last {
            guard let j = hay[i...last].firstIndex(of: first) else { return nil }
            if hay[j..<j + needle.count].elementsEqual(needle) { return j }
            i = j + 1
        }
        return nil
    }

    static func unescape(_ s: ArraySlice<UInt8>) -> String {
        guard s.contains(UInt8(ascii: "&")) else { return String(decoding: s, as: UTF8.self) }
        var out = [UInt8]()
        out.reserveCapacity(s.count)
        var i = s.startIndex
        while i < s.endIndex {
            if s[i] == UInt8(ascii: "&"), let semi = s[i...].prefix(12).firstIndex(of: UInt8(ascii: ";")) {
                let entity = String(decoding: s[(i + 1)..<semi], as: UTF8.self)
                var scalar: Unicode.Scalar?
                switch entity {
                case "amp": scalar = "&"
                case "lt": scalar = "<"
                case "gt": scalar = ">"
                case "quot": scalar = "\""
                case "apos": scalar = "'"
                default:
                    if entity.hasPrefix("#x") || entity.hasPrefix("#X") {
                        scalar = UInt32(entity.dropFirst(2), radix: 16).flatMap(Unicode.Scalar.init)
                    } else if entity.hasPrefix("#") {
                        scalar = UInt32(entity.dropFirst()).flatMap(Unicode.Scalar.init)
                    }
                }
                if let scalar {
                    out += Array(String(scalar).utf8)
                    i = semi + 1
                    continue
                }
            }
            out.append(s[i])
            i += 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func escape(_ s: String) -> String {
        var out = ""
        for u in s.unicodeScalars {
            switch u {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default: out.unicodeScalars.append(u)
            }
        }
        return out
    }
}
