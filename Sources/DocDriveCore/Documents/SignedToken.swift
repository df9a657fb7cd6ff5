// SignedToken: payloads sealed with the drive's secret key (bookmarks, reference entries) and
// opened only if the MAC, the purpose and every field check out.
import Crypto
import Foundation

/// What a sealed token is for; a token made for one purpose never opens as another.
public enum TokenPurpose: String, Sendable {
    case bookmark = "docdrive-bookmark-v1"
    case reference = "docdrive-reference-v1"
}

/// The drive's secret key (32 random bytes, hex in `secret.key`, mode 0600).
public struct DriveKey: Sendable {
    private let bytes: [UInt8]
    var key: SymmetricKey { SymmetricKey(data: bytes) }

    public init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// Reads the key; refuses a missing, malformed or group/world-readable file.
    public static func load(from home: DriveHome) throws(DriveError) -> DriveKey {
        let path = home.keyPath
        guard let attrs = try? FileManager.default.attributesOfItem(atPath: path),
              let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw DriveError(.notFound, "The drive key \(path) is missing; bookmarks and references cannot be checked without it.")
        }
        if let mode = attrs[.posixPermissions] as? Int, mode & 0o077 != 0 {
            throw DriveError(.invalidConfig, "The drive key \(path) is readable by others (mode \(String(mode, radix: 8))); run `chmod 600 \(path)`.")
        }
        let hex = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard hex.count == 64, let bytes = Self.decodeHex(hex) else {
            throw DriveError(.invalidConfig, "The drive key \(path) is not 64 hexadecimal digits.")
        }
        return DriveKey(bytes: bytes)
    }

    static func decodeHex(_ s: String) -> [UInt8]? {
        var out = [UInt8](), chars = Array(s.utf8)
        guard chars.count % 2 == 0 else { return nil }
        var i = 0
        while i < chars.count {
            guard let v = UInt8(String(decoding: chars[i..<i + 2], as: UTF8.self), radix: 16) else { return nil }
            out.append(v)
            i += 2
        }
        return out
    }
}

/// `base64url(payload JSON) "." base64url(HMAC-SHA256(key, purpose || 0 || payload))`.
public enum SignedToken {
    /// Longest token accepted; anything longer is refused before any decoding.
    public static let maxLength = 8192

    public static func seal<P: Encodable>(_ payload: P, purpose: TokenPurpose, key: DriveKey) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let body = (try? encoder.encode(payload)) ?? Data()
        let mac = HMAC<SHA256>.authenticationCode(for: signed(body, purpose), using: key.key)
        return base64url(body) + "." + base64url(Data(mac))
    }

    /// The payload, or a one-sentence refusal. Never returns anything for a token whose MAC,
    /// purpose or shape is wrong.
    public static func open<P: Decodable>(_ token: String, as: P.Type, purpose: TokenPurpose, key: DriveKey) throws(DriveError) -> P {
        let refused = DriveError(.invalidToken, "This \(purpose.noun) is not valid for this drive (forged, altered, truncated or made by another drive).")
        guard token.utf8.count <= maxLength else { throw refused }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let body = unbase64url(parts[0]), let mac = unbase64url(parts[1]),
              mac.count == SHA256.byteCount else { throw refused }
        // Constant-time check of the MAC before anything in the payload is believed.
        guard HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: signed(body, purpose), using: key.key) else {
            throw refused
        }
        do {
            return try JSONDecoder().decode(P.self, from: body)
        } catch {
            throw refused
        }
    }

    private static func signed(_ body: Data, _ purpose: TokenPurpose) -> Data {
        var d = Data(purpose.rawValue.utf8)
        d.append(0)
        d.append(body)
        return d
    }

    static func base64url(_ d: Data) -> String {
        d.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Strict: only the URL-safe alphabet, no padding, no whitespace.
    static func unbase64url(_ s: Substring) -> Data? {
        guard !s.isEmpty, s.utf8.allSatisfy({ b in
            (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2D || b == 0x5F
        }), s.utf8.count % 4 != 1 else { return nil }
        var b64 = s.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.utf8.count % 4 != 0 { b64 += "=" }
        guard let d = Data(base64Encoded: b64), base64url(d) == String(s) else { return nil }
        return d
    }
}

extension TokenPurpose {
    var noun: String {
        switch self {
        case .bookmark: return "bookmark"
        case .reference: return "reference entry"
        }
    }
}

/// What a bookmark says: which app made it, and the item (by stable id) with the path it had.
public struct BookmarkPayload: Codable, Equatable, Sendable {
    public var app: String
    public var root: String
    public var item: String
    public var path: String
    public var created: Double
    /// The item's file handle (base64): finds it again after renames made anywhere.
    public var handle: String?

    public init(app: String, root: String, item: String, path: String, created: Double, handle: String? = nil) {
        self.app = app
        self.root = root
        self.item = item
        self.path = path
        self.created = created
        self.handle = handle
    }
}
