// S3XML: reads the few flat XML documents S3 answers with (listings, errors, multipart
// replies) and writes the one it is sent (CompleteMultipartUpload); no general XML parser.

/// A very small reader: S3's answers are element trees without attributes that matter,
/// comments or mixed content, so finding `<Name>text</Name>` in order is enough.
struct S3XML {
    let text: Substring

    init(_ bytes: [UInt8]) { text = Substring(String(decoding: bytes, as: UTF8.self)) }
    init(_ text: Substring) { self.text = text }

    /// The name of the root element ("Error", "ListBucketResult", ...).
    var rootName: String? {
        var rest = text[...]
        while let lt = rest.firstIndex(of: "<") {
            let after = rest[rest.index(after: lt)...]
            if after.hasPrefix("?") || after.hasPrefix("!") {
                guard let gt = after.firstIndex(of: ">") else { return nil }
                rest = after[after.index(after: gt)...]
                continue
            }
            let end = after.firstIndex(where: { $0 == ">" || $0 == " " || $0 == "/" || $0 == "\n" }) ?? after.endIndex
            return String(after[..<end])
        }
        return nil
    }

    /// Every `<name>...</name>` element's inner text, in order (not nested in one another).
    func elements(_ name: String) -> [S3XML] {
        var out = [S3XML]()
        var rest = text[...]
        let open = "<" + name, close = "</" + name + ">"
        while let start = rest.range(of: open) {
            let afterName = rest[start.upperBound...]
            guard let c = afterName.first else { break }
            if c == "/" {  // <Name/>: empty
                out.append(S3XML(""))
                rest = afterName.dropFirst()
                continue
            }
            guard c == ">" || c == " " else { rest = afterName; continue }  // <NameOther>
            guard let gt = afterName.firstIndex(of: ">") else { break }
            if afterName[afterName.index(before: gt)] == "/" {
                out.append(S3XML(""))
                rest = afterName[afterName.index(after: gt)...]
                continue
            }
            let inner = afterName[afterName.index(after: gt)...]
            guard let end = inner.range(of: close) else { break }
            out.append(S3XML(inner[..<end.lowerBound]))
            rest = inner[end.upperBound...]
        }
        return out
    }

    /// The text of the first `<name>` element, entities decoded.
    func value(_ name: String) -> String? {
        elements(name).first.map { Self.unescape($0.text) }
    }

    static func unescape(_ s: Substring) -> String {
        guard s.contains("&") else { return String(s) }
        var out = ""
        var i = s.startIndex
        while i < s.endIndex {
            if s[i] == "&", let semi = s[i...].firstIndex(of: ";") {
                let entity = s[s.index(after: i)..<semi]
                var replaced: String?
                switch entity {
                case "amp": replaced = "&"
                case "lt": replaced = "<"
                case "gt": replaced = ">"
                case "quot": replaced = "\""
                case "apos": replaced = "'"
                default:
                    if entity.hasPrefix("#x") || entity.hasPrefix("#X"), let v = UInt32(entity.dropFirst(2), radix: 16), let u = Unicode.Scalar(v) {
                        replaced = String(Character(u))
                    } else if entity.hasPrefix("#"), let v = UInt32(entity.dropFirst()), let u = Unicode.Scalar(v) {
                        replaced = String(Character(u))
                    }
                }
                if let replaced {
                    out += replaced
                    i = s.index(after: semi)
                    continue
                }
            }
            out.append(s[i])
            i = s.index(after: i)
        }
        return out
    }

    static func escape(_ s: String) -> String {
        var out = ""
        for c in s {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default: out.append(c)
            }
        }
        return out
    }
}
