// S3Client: signed S3 requests to one bucket, retried with jittered exponential back-off on
// 5xx, 503 SlowDown, 429 and broken connections, and S3's answers turned into one sentence each
// (wrong key, missing bucket, unreachable endpoint, clock skew). Never a credential in a text.
import AsyncHTTPClient
import Crypto
import Foundation
import Synchronization
import SystemPackage
import NIOCore
import NIOHTTP1

/// How often and how long a request is retried before the remote counts as unreachable.
public struct S3RetryPolicy: Sendable {
    public var attempts: Int
    /// The first back-off; each further one doubles, up to `maxDelay`, and a random part of
    /// it is waited ("full jitter").
    public var baseDelay: Double
    public var maxDelay: Double

    public init(attempts: Int = 6, baseDelay: Double = 0.2, maxDelay: Double = 8) {
        self.attempts = attempts
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    func delay(afterAttempt n: Int) -> Double {
        let cap = min(maxDelay, baseDelay * pow(2, Double(n)))
        return cap / 2 + Double.random(in: 0...(cap / 2))
    }
}

/// The credentials requests are signed with, and where to read them again: temporary
/// credentials (a session token) expire, and whatever renews them (`aws sso login`, a
/// credential helper, an administrator) writes new ones into the credentials file. A request
/// the server refuses for its credentials is signed again with what the source holds now, when
/// that differs; otherwise its refusal is the sentence.
public final class S3Signer: Sendable {
    /// Lock: leaf.
    private let current: Mutex<SigV4>
    private let reload: (@Sendable () throws(RemoteError) -> SigV4.Credentials)?
    let region: String

    public init(credentials: SigV4.Credentials, region: String,
                reload: (@Sendable () throws(RemoteError) -> SigV4.Credentials)? = nil) {
        current = Mutex(SigV4(credentials: credentials, region: region))
        self.reload = reload
        self.region = region
    }

    var signer: SigV4 { current.withLock { $0 } }

    /// Reads the credentials again; true if they changed (the request is worth another try).
    func renew() -> Bool {
        guard let reload, let fresh = try? reload() else { return false }
        return current.withLock { s in
            let old = s.credentials
            guard fresh.accessKeyID != old.accessKeyID || fresh.secretAccessKey != old.secretAccessKey
                    || fresh.sessionToken != old.sessionToken else { return false }
            s = SigV4(credentials: fresh, region: region)
            return true
        }
    }

    /// The S3 error codes that mean the credentials, not the request, were refused.
    static let credentialCodes: Set<String> = ["ExpiredToken", "InvalidToken", "TokenRefreshRequired",
                                               "InvalidAccessKeyId", "SignatureDoesNotMatch"]
}

public struct S3Client: Sendable {
    public let settings: S3Settings
    let signing: S3Signer
    public var retry: S3RetryPolicy
    /// The clock requests are signed with (tests move it to provoke a skew).
    public var now: @Sendable () -> Date = { Date() }
    /// The server's clock, as the `Date` of its last answer gave it (journal names are dated by
    /// it, never by this machine's clock).
    let serverClock = S3ServerClock()

    private let scheme: String
    private let hostHeader: String
    /// `settings.usesPathStyle`, worked out once.
    private let pathStyle: Bool
    private let base: String  // scheme://host[:port]

    /// `reload`: where the credentials are read again when the server refuses them (see S3Signer).
    public init(settings: S3Settings, credentials: SigV4.Credentials, retry: S3RetryPolicy = S3RetryPolicy(),
                reload: (@Sendable () throws(RemoteError) -> SigV4.Credentials)? = nil) throws(RemoteError) {
        if let p = settings.problem(store: "this") {
            throw RemoteError(.invalidConfig, p.prefix(1).uppercased() + p.dropFirst() + ".")
        }
        self.settings = settings
        self.signing = S3Signer(credentials: credentials, region: settings.region, reload: reload)
        self.retry = retry
        let url = URL(string: settings.endpoint)!
        scheme = url.scheme!.lowercased()
        let defaultPort = scheme == "https" ? 443 : 80
        var host = url.host!
        if host.contains(":") && !host.hasPrefix("[") { host = "[" + host + "]" }  // IPv6
        pathStyle = settings.usesPathStyle
        if !pathStyle { host = settings.bucket + "." + host }
        hostHeader = url.port.map { $0 == defaultPort ? host : "\(host):\($0)" } ?? host
        base = scheme + "://" + hostHeader
    }

    /// "s3://bucket/prefix at http://127.0.0.1:8333", for sentences.
    var endpointName: String { settings.endpoint }

    /// The encoded URI path of a key (or of the bucket for nil).
    func uriPath(_ key: String?) -> String {
        let k = key.map { SigV4.encode($0, slash: false) } ?? ""
        return pathStyle ? "/" + settings.bucket + (key == nil ? "" : "/" + k) : "/" + k
    }

    // MARK: Sending

    /// Sends a signed request, retrying what may pass on a second try, and returns the final
    /// answer whatever its status (`failure` turns an unwanted one into a sentence). Throws
    /// `.unreachable` once the retries are spent, or what `sink` or the local file caused.
    func send(_ method: HTTPMethod, key: String?, query: [(String, String)] = [], headers extra: [(String, String)] = [],
              body: S3Body = .empty, sink: ((HTTPResponseHead, ByteBuffer) throws -> Void)? = nil, retries: Bool = true,
              beforeRetry: (() throws(RemoteError) -> Void)? = nil) throws(RemoteError) -> S3Response {
        var attempt = 0
        var renewed = false
        while true {
            let outcome: Result<S3Response, any Error>
            do {
                outcome = .success(try sendOnce(method, key: key, query: query, headers: extra, body: body, sink: sink))
            } catch {
                outcome = .failure(error)
            }
            let why: String
            switch outcome {
            case .success(let r):
                let code = r.status
                let s3Code = S3XML(r.body).value("Code")
                let transient = code >= 500 || code == 429 || s3Code == "RequestTimeout" || s3Code == "SlowDown"
                if !transient {
                    if let d = r.header("Date") { serverClock.saw(d) }
                    // Refused for its credentials: once more with fresh ones, if there are any.
                    if (code == 400 || code == 403), let c = s3Code, S3Signer.credentialCodes.contains(c), !renewed,
                       signing.renew() {
                        renewed = true
                        continue
                    }
                    return r
                }
                why = "answered \(code)\(s3Code.map { " " + $0 } ?? "")"
            case .failure(let e):
                if let local = e as? S3LocalFailure { throw Self.describe(local) }
                if let d = e as? RemoteError { throw d }
                why = "cannot be reached (\(Self.describe(transport: e)))"
            }
            attempt += 1
            if !retries || attempt >= retry.attempts {
                throw RemoteError(.unreachable, "The S3 endpoint \(endpointName) \(why)\(attempt > 1 ? " after \(attempt) attempts" : "").")
            }
            Thread.sleep(forTimeInterval: retry.delay(afterAttempt: attempt - 1))
            try beforeRetry?()
        }
    }

    private func sendOnce(_ method: HTTPMethod, key: String?, query: [(String, String)], headers extra: [(String, String)],
                          body: S3Body, sink: ((HTTPResponseHead, ByteBuffer) throws -> Void)?) throws -> S3Response {
        let path = uriPath(key)
        var headers: [(String, String)] = [("Host", hostHeader)] + extra
        let payloadHash: String
        switch body {
        case .empty: payloadHash = SigV4.emptyPayloadHash
        case .bytes(let b): payloadHash = SigV4.hex(SHA256Digest.of(b))
        case .file: payloadHash = SigV4.unsignedPayload
        }
        headers.append(("x-amz-content-sha256", payloadHash))
        let signed = signing.signer.sign(method: method.rawValue, path: path, query: query, headers: headers, payloadHash: payloadHash, date: now())
        var http = HTTPHeaders()
        for (n, v) in signed.headers { http.add(name: n, value: v) }
        if body.length > 0 || method == .PUT || method == .POST { http.replaceOrAdd(name: "Content-Length", value: String(body.length)) }
        var url = base + path
        if !query.isEmpty {
            url += "?" + query.map { SigV4.encode($0.0, slash: true) + "=" + SigV4.encode($0.1, slash: true) }.joined(separator: "&")
        }
        return try S3HTTP.execute(method: method, url: url, headers: http, body: body, sink: sink)
    }

    // MARK: Sentences

    /// The sentence for an answer the caller did not want. `what`: "list s3://b/p", "upload Reports/q3.odt".
    func failure(_ r: S3Response, _ what: String) -> RemoteError {
        let xml = S3XML(r.body)
        let code = xml.value("Code") ?? ""
        let message = xml.value("Message").map { ": " + $0 } ?? ""
        let bucket = settings.bucket
        switch (r.status, code) {
        case (412, _), (409, "ConditionalRequestConflict"):
            return RemoteError(.changed, "Cannot \(what): the object on \(settings.displayName) changed meanwhile (another device wrote it).")
        case (_, "NoSuchBucket"):
            return RemoteError(.unreachable, "The bucket \(bucket) does not exist at \(endpointName); create it first (for example `aws s3 mb s3://\(bucket)`).")
        case (_, "SignatureDoesNotMatch"):
            return RemoteError(.unreachable, "The S3 server at \(endpointName) refused the secret key: it does not match the access key ID (check AWS_SECRET_ACCESS_KEY or the credentials file).")
        case (_, "InvalidAccessKeyId"):
            return RemoteError(.unreachable, "The S3 server at \(endpointName) does not know the access key ID (check AWS_ACCESS_KEY_ID or the credentials file).")
        case (_, "RequestTimeTooSkewed"):
            return RemoteError(.unreachable, "This machine's clock is too far from the S3 server's at \(endpointName)\(skewDetail(r)); set the clock right (enable NTP) and try again.")
        case (_, "ExpiredToken"), (_, "InvalidToken"):
            return RemoteError(.unreachable, "The S3 session token was refused by \(endpointName): it has expired or is not valid; put fresh credentials in the credentials file (they are read again at the next request), or restart the drive with a new AWS_SESSION_TOKEN.")
        case (403, _):
            return RemoteError(.unreachable, "The S3 server at \(endpointName) refused access to the bucket \(bucket) (\(code.isEmpty ? "403" : code)): the key lacks the permission to \(what).")
        case (404, _):
            return RemoteError(.notFound, "Cannot \(what): there is no such object on \(settings.displayName).")
        case (501, _), (_, "NotImplemented"):
            return RemoteError(.unsupported, "Cannot \(what): the S3 server at \(endpointName) does not implement it\(message).")
        default:
            return RemoteError(.io, "Cannot \(what): the S3 server at \(endpointName) answered \(r.status)\(code.isEmpty ? "" : " " + code)\(message).")
        }
    }

    private func skewDetail(_ r: S3Response) -> String {
        let xml = S3XML(r.body)
        let server = xml.value("ServerTime") ?? r.header("Date")
        return server.map { " (the server's time is \($0), this machine's \(Date()))" } ?? ""
    }

    static func describe(_ local: S3LocalFailure) -> RemoteError {
        switch local {
        case .shortRead(let n):
            return RemoteError(.sourceChanged, "The file got shorter during its upload (after \(n) bytes); it will be uploaded again.")
        case .read(let e):
            return RemoteError(.io, "Cannot read the file to upload: \(String(cString: strerror(e))).")
        case .write(let e):
            return RemoteError.io("Cannot write the downloaded file", Errno(rawValue: e))
        }
    }

    static func describe(transport e: any Error) -> String {
        if let h = e as? HTTPClientError {
            switch h {
            case .connectTimeout: return "connection timed out"
            case .readTimeout: return "no answer in time"
            case .remoteConnectionClosed: return "the connection was closed"
            default: return "\(h)"
            }
        }
        if let io = e as? IOError { return String(cString: strerror(io.errnoCode)) }
        let text = "\(e)"
        if text.contains("connectionRefused") || text.contains("Connection refused") { return "connection refused" }
        return text
    }
}

/// SHA-256 of a body held in memory (small requests are signed over their content).
enum SHA256Digest {
    static func of(_ bytes: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: bytes)) }
}

/// The server's time, from the `Date` of its answers (to the second), and how long ago on this
/// machine's monotonic clock it was seen: `now` is that time plus the time passed since.
package final class S3ServerClock: Sendable {
    private let seen = Mutex<(header: String, ms: Int64, at: UInt64)?>(nil)

    /// An answer's `Date` ("Mon, 07 Dec 2026 21:34:40 GMT"); one that cannot be read is ignored.
    package init() {}

    package func saw(_ header: String) {
        let now = DispatchTime.now().uptimeNanoseconds
        seen.withLock { s in
            if let s0 = s, s0.header == header { return }  // the same second: kept as first seen
            guard let ms = Self.milliseconds(httpDate: header) else { return }
            s = (header, ms, now)
        }
    }

    /// The server's time now in milliseconds since 1970, nil before any answer had a `Date`.
    package var now: Int64? {
        seen.withLock { s in
            s.map { $0.ms + Int64((DispatchTime.now().uptimeNanoseconds - $0.at) / 1_000_000) }
        }
    }

    /// An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") in milliseconds since 1970.
    package static func milliseconds(httpDate: String) -> Int64? {
        let f = httpDate.split(separator: " ")
        guard f.count == 6, f[5] == "GMT", let day = Int(f[1]), let year = Int(f[3]),
              let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].firstIndex(of: String(f[2])) else { return nil }
        let t = f[4].split(separator: ":").compactMap { Int($0) }
        guard t.count == 3, (1...31).contains(day), (1970...9999).contains(year), (0...23).contains(t[0]),
              (0...59).contains(t[1]), (0...60).contains(t[2]) else { return nil }
        // Days since 1970 (the civil-from-days inverse, proleptic Gregorian).
        let y = month < 2 ? year - 1 : year
        let era = y / 400
        let yoe = y - era * 400
        let mp = (month + 10) % 12  // (month from 0: March is 0)
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146097 + doe - 719468
        return Int64(((days * 24 + t[0]) * 60 + t[1]) * 60 + t[2]) * 1000
    }
}
