// QueryKinds: an item's kind for `kind:` queries, from its name's extension, else its first bytes.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

enum QueryKinds {
    /// Extension (lower case) -> the kind stored in the index.
    static let byExtension: [String: QueryKind] = {
        var m = [String: QueryKind]()
        for e in ["odt", "ott", "doc", "docx", "rtf", "fodt", "pages", "abw", "epub", "tex", "djvu"] { m[e] = .document }
        for e in ["ods", "ots", "xls", "xlsx", "csv", "tsv", "fods", "numbers"] { m[e] = .spreadsheet }
        for e in ["odp", "otp", "ppt", "pptx", "fodp", "key"] { m[e] = .presentation }
        m["pdf"] = .pdf
        for e in ["txt", "md", "markdown", "rst", "org", "log", "text", "adoc", "json", "yaml", "yml", "toml", "xml",
                  "html", "htm", "css", "ini", "conf", "c", "h", "cc", "cpp", "hpp", "swift", "py", "rs", "go",
                  "java", "js", "ts", "sh", "rb", "pl", "lua", "sql"] { m[e] = .text }
        for e in ["png", "jpg", "jpeg", "gif", "webp", "bmp", "tif", "tiff", "svg", "heic", "heif", "avif",
                  "ico", "xcf", "raw", "cr2", "nef", "dng", "psd"] { m[e] = .image }
        for e in ["mp3", "ogg", "oga", "opus", "flac", "wav", "m4a", "aac", "wma", "aiff", "mid", "midi"] { m[e] = .audio }
        for e in ["mp4", "m4v", "mkv", "webm", "avi", "mov", "ogv", "wmv", "mpg", "mpeg", "3gp"] { m[e] = .video }
        for e in ["zip", "tar", "gz", "tgz", "bz2", "xz", "zst", "7z", "rar"] { m[e] = .archive }
        return m
    }()

    /// Which stored kinds a `kind:` value matches: a "document" is any office or text document.
    static func stored(for k: QueryKind) -> [String] {
        switch k {
        case .document: ["document", "pdf", "text", "spreadsheet", "presentation"]
        default: [k.rawValue]
        }
    }

    static func fromName(_ name: String) -> QueryKind? {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return nil }
        return byExtension[name[name.index(after: dot)...].lowercased()]
    }

    /// The kind from the content type (its first bytes), for a file whose name says nothing.
    static func fromContent(_ fd: Int32) -> QueryKind? {
        var b = [UInt8](repeating: 0, count: 64)
        let n = b.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return nil }
        let h = Array(b[0..<n])
        func starts(_ s: [UInt8], at o: Int = 0) -> Bool { h.count >= o + s.count && Array(h[o..<(o + s.count)]) == s }
        if starts(Array("%PDF-".utf8)) { return .pdf }
        if starts([0x89, 0x50, 0x4E, 0x47]) || starts([0xFF, 0xD8, 0xFF]) || starts(Array("GIF8".utf8))
            || (starts(Array("RIFF".utf8)) && starts(Array("WEBP".utf8), at: 8)) { return .image }
        if starts(Array("ID3".utf8)) || starts(Array("fLaC".utf8)) || starts(Array("OggS".utf8))
            || (starts(Array("RIFF".utf8)) && starts(Array("WAVE".utf8), at: 8)) { return .audio }
        if starts(Array("ftyp".utf8), at: 4) || starts([0x1A, 0x45, 0xDF, 0xA3])
            || (starts(Array("RIFF".utf8)) && starts(Array("AVI ".utf8), at: 8)) { return .video }
        if starts(Array("PK\u{03}\u{04}".utf8)) {
            // An OpenDocument file starts with its uncompressed "mimetype" entry.
            let s = String(decoding: h, as: UTF8.self)
            if s.contains("opendocument.spreadsheet") { return .spreadsheet }
            if s.contains("opendocument.presentation") { return .presentation }
            if s.contains("opendocument") { return .document }
            return .archive
        }
        if starts([0x1F, 0x8B]) || starts(Array("7z".utf8)) || starts([0xFD, 0x37, 0x7A, 0x58]) { return .archive }
        // Text: valid UTF-8 with no NUL and few control characters.
        if !h.contains(0), !h.contains(where: { $0 < 0x09 || ($0 > 0x0D && $0 < 0x20) }) { return .text }
        return nil
    }
}
