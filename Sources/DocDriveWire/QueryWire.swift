// QueryWire: what the `docdrive` front (DocDriveFront) and the daemon must agree on for the query
// fast path: the control protocol's version, the socket's name, the request line, the raw answer.
//
// Why a module of its own, with no Foundation: the front links it statically and starts in about
// half a millisecond; DocDriveCore (Foundation, GRDB, NIO) re-exports the same constants, so a
// change here changes both sides at once.

public enum QueryWire {
    /// The control protocol's version (`ControlProtocol.version` is this).
    public static let protocolVersion = 3
    /// The control socket's name in the drive's run folder (`DriveHome.controlSocketName`).
    public static let controlSocketName = "control.sock"
    /// The first byte of a raw answer (an error answer is a JSON line, which starts with "{").
    public static let rawMarker = UInt8(ascii: "=")

    /// The request line of a raw `query`, with the keys, order and values JSONEncoder writes for
    /// `ControlRequest.query` (ControlProtocolTests decodes it and compares).
    public static func requestLine(expr: [String], scopes: [String], sort: String?, descending: Bool?, limit: Int?,
                                   count: Bool, pathsOnly: Bool, raw: Bool) -> String {
        func list(_ a: [String]) -> String { "[" + a.map(jsonString).joined(separator: ",") + "]" }
        var s = #"{"version":"# + String(protocolVersion) + #","command":"query","expr":"# + list(expr) + #","in":"# + list(scopes)
        if let sort { s += #","sort":"# + jsonString(sort) }
        if let descending { s += #","descending":"# + (descending ? "true" : "false") }
        if let limit { s += #","limit":"# + String(limit) }
        return s + #","count":"# + (count ? "true" : "false") + #","pathsOnly":"# + (pathsOnly ? "true" : "false")
            + #","raw":"# + (raw ? "true" : "false") + "}\n"
    }

    /// A JSON string, as JSONEncoder writes it (slashes unescaped).
    public static func jsonString(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if u.value < 0x20 {
                    let hex = String(u.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(u)
                }
            }
        }
        return out + "\""
    }

    /// The raw answer: the marker and the version, NUL, the mount point, NUL, then the count or
    /// each mount-relative path, each NUL-ended.
    public static func rawAnswer(mountpoint: String, count: Int?, paths: [String]) -> [UInt8] {
        var out = [rawMarker]
        out += String(protocolVersion).utf8
        out.append(0)
        out += mountpoint.utf8
        out.append(0)
        if let count {
            out += String(count).utf8
            out.append(0)
        }
        for p in paths {
            out += p.utf8
            out.append(0)
        }
        return out
    }

    /// A raw answer read back: the mount point and the fields after it; nil if it is not one of
    /// this version (an error's JSON line, or another daemon's).
    public static func parseRaw(_ answer: [UInt8]) -> (mountpoint: ArraySlice<UInt8>, fields: [ArraySlice<UInt8>])? {
        guard answer.first == rawMarker, answer.last == 0 else { return nil }
        let fields = answer.dropFirst().dropLast().split(separator: 0, omittingEmptySubsequences: false)
        guard fields.count >= 2, Array(fields[0]) == Array(String(protocolVersion).utf8) else { return nil }
        return (fields[1], Array(fields.dropFirst(2)))
    }
}
