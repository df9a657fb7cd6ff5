// SigV4: AWS Signature Version 4 for S3 requests (there is no AWS SDK here): the canonical
// request, the string to sign and the signature, checked against AWS's published test vectors.
import Crypto
import Foundation
import Synchronization

public struct SigV4: Sendable {
    public struct Credentials: Sendable {
        public var accessKeyID: String
        public var secretAccessKey: String
        public var sessionToken: String?

        public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
            self.accessKeyID = accessKeyID
            self.secretAccessKey = secretAccessKey
            self.sessionToken = sessionToken
        }
    }

    /// What a signature is made of, kept for tests and for error reports (never the secret).
    public struct Signed: Sendable {
        /// The headers to send: the caller's, plus X-Amz-Date, X-Amz-Security-Token (with a
        /// session token) and Authorization.
        public var headers: [(String, String)]
        public var canonicalRequest: String
        public var stringToSign: String
        public var authorization: String
    }

    /// The SHA-256 of an empty body, and the marker of a body that is not signed.
    public static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    public static let unsignedPayload = "UNSIGNED-PAYLOAD"

    public let credentials: Credentials
    public let region: String
    public let service: String
    /// The signing key of the day last signed for (it changes once a day; deriving it takes
    /// four HMACs, a tenth of a small upload's signing time).
    private let dayKey = DayKey()

    final class DayKey: Sendable {
        /// Lock: leaf.
        let last = Mutex<(day: String, key: [UInt8])?>(nil)
    }

    public init(credentials: Credentials, region: String, service: String = "s3") {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    /// Signs a request. `path`: the URI path as it is sent (already encoded, see `encode`);
    /// `query`: the query's names and values, not encoded; `headers`: every header to sign
    /// (Host among them); `payloadHash`: the hex SHA-256 of the body, or `unsignedPayload`.
    public func sign(method: String, path: String, query: [(String, String)] = [], headers: [(String, String)],
                     payloadHash: String, date: Date) -> Signed {
        let amzDate = Self.timestamp(date)
        let day = String(amzDate.prefix(8))
        var headers = headers
        if !headers.contains(where: { $0.0.lowercased() == "x-amz-date" }) { headers.append(("X-Amz-Date", amzDate)) }
        if let token = credentials.sessionToken, !headers.contains(where: { $0.0.lowercased() == "x-amz-security-token" }) {
            headers.append(("X-Amz-Security-Token", token))
        }
        // Header names in lower case, values trimmed with inner runs of spaces made one; a
        // name given several times has its values joined by commas, in the order given.
        var byName = [String: [String]]()
        var order = [String]()
        for (name, value) in headers {
            let n = name.lowercased()
            if byName[n] == nil { order.append(n) }
            byName[n, default: []].append(Self.trimmed(value))
        }
        let names = order.sorted()
        let canonicalHeaders = names.map { "\($0):\(byName[$0]!.joined(separator: ","))\n" }.joined()
        let signedHeaders = names.joined(separator: ";")
        var pairs: [(String, String)] = query.map { (Self.encode($0.0, slash: true), Self.encode($0.1, slash: true)) }
        pairs.sort { (a: (String, String), b: (String, String)) -> Bool in a.0 != b.0 ? a.0 < b.0 : a.1 < b.1 }
        let canonicalQuery: String = pairs.map { (p: (String, String)) -> String in p.0 + "=" + p.1 }.joined(separator: "&")
        let canonicalRequest = [method, path.isEmpty ? "/" : path, canonicalQuery, canonicalHeaders, signedHeaders, payloadHash]
            .joined(separator: "\n")
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = ["AWS4-HMAC-SHA256", amzDate, scope, Self.hex(SHA256.hash(data: Data(canonicalRequest.utf8)))]
            .joined(separator: "\n")
        let signature = Self.hex(HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: signingKeyOfTheDay(day)))
        let authorization = "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope), SignedHeaders=\(signedHeaders), Signature=\(signature)"
        headers.append(("Authorization", authorization))
        return Signed(headers: headers, canonicalRequest: canonicalRequest, stringToSign: stringToSign, authorization: authorization)
    }

    /// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, day), region), service), "aws4_request").
    func signingKey(day: String) -> SymmetricKey {
        var key = SymmetricKey(data: Data(("AWS4" + credentials.secretAccessKey).utf8))
        for part in [day, region, service, "aws4_request"] {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
        }
        return key
    }

    /// `signingKey(day:)`, derived once a day.
    func signingKeyOfTheDay(_ day: String) -> SymmetricKey {
        if let bytes = dayKey.last.withLock({ $0?.day == day ? $0?.key : nil }) { return SymmetricKey(data: bytes) }
        let key = signingKey(day: day)
        let bytes = key.withUnsafeBytes { Array($0) }
        dayKey.last.withLock { $0 = (day, bytes) }
        return key
    }

    /// RFC 3986 encoding as SigV4 wants it: everything but A-Z a-z 0-9 - . _ ~ is %XX (upper
    /// case); `/` too unless `slash` is false (an object key's path keeps its slashes).
    public static func encode(_ s: String, slash: Bool) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            case UInt8(ascii: "/") where !slash:
                out.append("/")
            default:
                out += String(format: "%%%02X", b)
            }
        }
        return out
    }

    /// 20150830T123600Z (digits written by hand: `String(format:)` costs more than the HMACs).
    static func timestamp(_ d: Date) -> String {
        var t = time_t(d.timeIntervalSince1970)
        var tmv = tm()
        gmtime_r(&t, &tmv)
        var out = [UInt8]()
        out.reserveCapacity(16)
        func digits(_ v: Int32, _ n: Int) {
            var div: Int32 = 1
            for _ in 1..<n { div *= 10 }
            while div > 0 {
                out.append(UInt8(ascii: "0") + UInt8((v / div) % 10))
                div /= 10
            }
        }
        digits(tmv.tm_year + 1900, 4)
        digits(tmv.tm_mon + 1, 2)
        digits(tmv.tm_mday, 2)
        out.append(UInt8(ascii: "T"))
        digits(tmv.tm_hour, 2)
        digits(tmv.tm_min, 2)
        digits(tmv.tm_sec, 2)
        out.append(UInt8(ascii: "Z"))
        return String(decoding: out, as: UTF8.self)
    }

    /// A header value trimmed, with inner runs of spaces and tabs made one space.
    static func trimmed(_ v: String) -> String {
        // Nearly every value is printable ASCII with single inner spaces: already canonical.
        var previous: UInt8 = 0
        var canonical = true
        for b in v.utf8 {
            if b < 0x20 || b > 0x7E || (b == 0x20 && (previous == 0 || previous == 0x20)) {
                canonical = false
                break
            }
            previous = b
        }
        if canonical && previous != 0x20 { return v }
        var out = ""
        var space = false
        for c in v.trimmingCharacters(in: .whitespaces) {
            if c == " " || c == "\t" {
                if !space { out.append(" ") }
                space = true
            } else {
                out.append(c)
                space = false
            }
        }
        return out
    }

    static func hex<D: Sequence>(_ d: D) -> String where D.Element == UInt8 { Hex.encode(Array(d)) }
}
