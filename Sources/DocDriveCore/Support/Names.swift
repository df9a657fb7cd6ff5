// Names: the checks every name and path from outside passes before the drive uses it.

/// Rules for names that come from users, config files, remote listings and FUSE requests.
public enum Names {
    /// Linux's NAME_MAX for the backing filesystems we support.
    public static let maxNameBytes = 255

    /// Why a name is refused, as a short phrase for an error sentence; nil when it is fine.
    public static func problem(withFileName name: String) -> String? {
        let bytes = name.utf8.count
        if bytes == 0 { return "it is empty" }
        if bytes > maxNameBytes { return "it is longer than \(maxNameBytes) bytes" }
        if name == "." || name == ".." { return "it is \".\" or \"..\"" }
        if name.utf8.contains(0) { return "it contains a NUL byte" }
        if name.utf8.contains(UInt8(ascii: "/")) { return "it contains \"/\"" }
        return nil
    }

    /// A top-level display name: a valid file name that does not start with "." (".by-app" is ours).
    public static func problem(withDisplayName name: String) -> String? {
        if let p = problem(withFileName: name) { return p }
        if name.hasPrefix(".") { return "it starts with \".\" (reserved for the drive's own folders)" }
        if name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            return "it contains a control character"
        }
        return nil
    }

    /// App ids are reverse-DNS style: letters, digits, ".", "-", "_", starting with a letter or digit.
    public static func problem(withAppID id: String) -> String? {
        problem(withIdentifier: id, allowed: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_",
                phrase: "an app id is made of letters, digits, \".\", \"-\" and \"_\", such as com.example.notes")
    }

    /// Store names are short machine names: lowercase letters, digits, "-" and "_".
    public static func problem(withStoreName name: String) -> String? {
        problem(withIdentifier: name, allowed: "abcdefghijklmnopqrstuvwxyz0123456789-_",
                phrase: "a store name is made of lowercase letters, digits, \"-\" and \"_\", such as shared; the name the mount shows is its display name, --name")
    }

    /// `phrase`: what such an identifier is made of, told with a character that is not.
    private static func problem(withIdentifier id: String, allowed: String, phrase: String) -> String? {
        if id.isEmpty { return "it is empty" }
        if id.utf8.count > 128 { return "it is longer than 128 bytes" }
        let ok = Set(allowed.unicodeScalars)
        if let bad = id.unicodeScalars.first(where: { !ok.contains($0) }) {
            return "it contains \"\(bad.escaped(asASCII: true))\" (\(phrase))"
        }
        if let first = id.unicodeScalars.first, !(first.properties.isAlphabetic || ("0"..."9").contains(first)) {
            return "it must start with a letter or digit"
        }
        if id.contains("..") { return "it contains \"..\"" }
        return nil
    }

    /// Why a path inside a folder ("a/b/c.txt") is refused; nil when every component is a
    /// valid file name (no "", ".", "..", NUL, and none longer than 255 bytes).
    public static func problem(withRelativePath path: String) -> String? {
        if path.isEmpty { return "it is empty" }
        if path.utf8.count > 4095 { return "it is longer than 4095 bytes" }
        if path.hasPrefix("/") { return "it is absolute" }
        for part in path.split(separator: "/", omittingEmptySubsequences: false) {
            if let p = problem(withFileName: String(part)) { return "a part of it is not a valid name: \(p)" }
        }
        return nil
    }

    public static func isSafeRelativePath(_ path: String) -> Bool { problem(withRelativePath: path) == nil }
}
