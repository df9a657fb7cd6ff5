// The fuzz targets: every parser and converter of bytes that come from outside the daemon, for
// libFuzzer (built with -sanitize=fuzzer,address by mount-scripts/fuzz.sh; libFuzzer gives the
// program its main). One program, the target chosen by DOCDRIVE_FUZZ_TARGET (fuzz.sh sets it):
//
//   DOCDRIVE_FUZZ_TARGET=s3-xml .build-fuzz/release/docdrive-fuzz Fuzz/corpus/s3-xml
//
// A target calls the parser the way the daemon does and then uses what it read as the daemon
// would (times converted, sizes and keys decoded), so a trap anywhere on that way is found; where
// the code promises a round trip (a key encoded and decoded, metadata written and read) the
// target checks it and aborts on a difference.
@testable import DocDriveCore
import DocDriveWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Every target by name (`fuzz.sh` lists them from here: `docdrive-fuzz -help=1` is libFuzzer's).
nonisolated(unsafe) let targets: [String: ([UInt8]) -> Void] = [
    "remote-meta": FuzzRemoteMeta.run,
    "s3-xml": FuzzS3XML.run,
    "s3-headers": FuzzS3Headers.run,
    "s3-keys": FuzzS3Keys.run,
    "s3-answers": FuzzS3Answers.run,
    "config": FuzzConfig.run,
    "reference": FuzzTokens.reference,
    "bookmark": FuzzTokens.bookmark,
    "query": FuzzQuery.run,
    "control": FuzzControl.run,
    "status": FuzzStatus.run,
    "query-wire": FuzzQueryWire.run,
    "home-json": FuzzHomeJSON.run,
    "mountinfo": FuzzMountInfo.run,
]

nonisolated(unsafe) let chosen: ([UInt8]) -> Void = {
    let name = ProcessInfo.processInfo.environment["DOCDRIVE_FUZZ_TARGET"] ?? ""
    guard let t = targets[name] else {
        say("docdrive-fuzz: set DOCDRIVE_FUZZ_TARGET to one of: \(targets.keys.sorted().joined(separator: " "))")
        exit(2)
    }
    return t
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    chosen(bytes)
    return 0
}

/// A line on stderr.
func say(_ line: String) {
    var text = line + "\n"
    text.withUTF8 { b in _ = write(2, b.baseAddress, b.count) }
}

/// Aborts (a crash libFuzzer keeps) when a promise of the code does not hold.
func expect(_ ok: @autoclosure () -> Bool, _ what: @autoclosure () -> String) {
    if !ok() {
        say("docdrive-fuzz: broken promise: \(what())")
        abort()
    }
}

/// A folder of this process for the targets that read files.
let scratch: String = {
    // tmpfs where there is one: the answers file is synced at every write.
    let base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"
    var t = Array("\(base)/docdrive-fuzz-XXXXXX".utf8CString)
    guard let p = mkdtemp(&t) else { fatalError("mkdtemp") }
    atexit { try? FileManager.default.removeItem(atPath: scratch) }
    return String(cString: p)
}()

func writeScratch(_ name: String, _ bytes: [UInt8]) -> String {
    let path = scratch + "/" + name
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    precondition(fd >= 0)
    var done = 0
    while done < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, $0.count - done) }
        precondition(n > 0)
        done += n
    }
    close(fd)
    return path
}

/// What the daemon does with a time that came from outside.
func useTime(_ ns: Int64) {
    let ts = Timestamp.timespec(ns)
    expect(ts.tv_nsec >= 0 && ts.tv_nsec < 1_000_000_000, "timespec(\(ns)) has tv_nsec \(ts.tv_nsec)")
    expect(Timestamp.nanoseconds(ts) == ns, "timespec(\(ns)) does not come back")
    let text = Timestamp.decimalSeconds(ns)
    expect(Timestamp.nanoseconds(decimalSeconds: text) == ns, "decimalSeconds(\(ns)) = \(text) does not come back")
}

/// What the daemon does with metadata read from a remote.
func useMeta(_ m: RemoteMeta) {
    if let t = m.mtimeNanoseconds { useTime(t) }
    _ = m.fileMode
    // Written again (to S3 as headers, to a folder remote as JSON), it reads back the same.
    let again = S3Meta.meta(S3Meta.headers(m)).meta
    expect(again == m, "S3 headers of \(m) read back as \(again)")
    let json = m.jsonBytes
    let back = json.withUnsafeBytes { RemoteMeta.decodingJSON($0) }
    expect(back == m, "JSON of \(m) read back as \(String(describing: back))")
}

// MARK: remote metadata (folder remote: JSON in an extended attribute)

enum FuzzRemoteMeta {
    static func run(_ b: [UInt8]) {
        let fast = b.withUnsafeBytes { RemoteMeta.decodingCommonJSON($0) }
        let m = b.withUnsafeBytes { RemoteMeta.decodingJSON($0) }
        if let fast {
            // The reader promises to read what JSONDecoder reads.
            let slow = try? JSONDecoder().decode(RemoteMeta.self, from: Data(b))
            expect(slow == fast, "the reader read \(fast), JSONDecoder \(String(describing: slow))")
        }
        if let m { useMeta(m) }
    }
}

// MARK: S3 answers: XML (listings, errors, multipart replies)

enum FuzzS3XML {
    static func run(_ b: [UInt8]) {
        let xml = S3XML(b)
        _ = xml.rootName
        // As S3Remote.listPage reads a ListObjectsV2 page.
        let urlEncoded = xml.value("EncodingType") == "url"
        let keys = S3Keys(prefix: "store")
        for c in xml.elements("Contents") {
            guard var key = c.value("Key") else { continue }
            if urlEncoded { key = S3Remote.urlDecoded(key) }
            _ = S3Remote.unquoted(c.value("ETag") ?? "")
            _ = Int64(c.value("Size") ?? "") ?? 0
            if let second = c.value("LastModified").flatMap(S3Remote.modifiedSecond) {
                _ = S3Remote.nanoseconds(ofSecond: second)
            }
            _ = keys.path(ofKey: key)
            _ = keys.isUnshown(key)
        }
        _ = xml.value("IsTruncated") == "true" ? xml.value("NextContinuationToken") : nil
        // ListMultipartUploads, errors, multipart replies.
        for u in xml.elements("Upload") { _ = (u.value("Key"), u.value("UploadId")) }
        for name in ["Code", "Message", "ServerTime", "UploadId", "ETag"] { _ = xml.value(name) }
        // What is escaped into the one document the drive sends comes back.
        let text = String(decoding: b, as: UTF8.self)
        let round = S3XML.unescape(ArraySlice(S3XML.escape(text).utf8))
        expect(round == text, "escape/unescape of \(text.debugDescription) gave \(round.debugDescription)")
    }
}

// MARK: S3 answers: headers (HEAD, GET, PUT)

enum FuzzS3Headers {
    /// "Name: value" lines, as an HTTP answer's headers.
    static func run(_ b: [UInt8]) {
        let text = String(decoding: b, as: UTF8.self)
        var headers = [(String, String)]()
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            let l = line.hasSuffix("\r") ? line.dropLast() : line
            guard let colon = l.firstIndex(of: ":") else { continue }
            headers.append((String(l[..<colon]), String(l[l.index(after: colon)...]).trimmingCharacters(in: .whitespaces)))
        }
        func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
        // As S3Remote.head reads an answer.
        let (meta, _, _) = S3Meta.meta(headers)
        _ = S3Remote.unquoted(header("ETag") ?? "")
        _ = Int64(header("Content-Length") ?? "") ?? 0
        if let s = header("Last-Modified").flatMap(S3Remote.modifiedSecond) { _ = S3Remote.nanoseconds(ofSecond: s) }
        if let s = header("Date").flatMap(S3Remote.modifiedSecond) { _ = S3Remote.nanoseconds(ofSecond: s) }
        for (n, _) in headers { _ = S3Meta.isOwn(n) }
        useMeta(meta)
        // One value alone, as rclone's mtime.
        if let ns = Timestamp.nanoseconds(decimalSeconds: text) { useTime(ns) }
    }
}

// MARK: S3 keys

enum FuzzS3Keys {
    static func run(_ b: [UInt8]) {
        // The first byte chooses the prefix; the rest is a key from a listing, or a path.
        let prefixes = ["", "store", "a/b", "/x//y/"]
        let keys = S3Keys(prefix: prefixes[Int(b.first ?? 0) % prefixes.count])
        let rest = Array(b.dropFirst())
        let key = String(decoding: rest, as: UTF8.self)
        if let (path, folder) = keys.path(ofKey: key), let again = try? keys.key(path, folder: folder) {
            // A path read from another tool's key may be written under a key of the drive's own
            // form ("~dd~%41" for "~dd~A"), which reads as that path again.
            let back = keys.path(ofKey: again)
            expect(back?.path == path && back?.folder == folder, "key \(key.debugDescription) read as \(path), written as \(again.debugDescription), reads as \(String(describing: back))")
        }
        _ = keys.isUnshown(key)
        // The bytes as a store path: its key reads back as it.
        let path = StorePath(bytes: rest)
        if let k = try? keys.key(path) {
            let back = keys.path(ofKey: k)
            expect(back?.path == path && back?.folder == false, "path \(path) has the key \(k.debugDescription), read as \(String(describing: back))")
            expect(!keys.isUnshown(k), "path \(path)'s own key \(k.debugDescription) is unshown")
        }
        for name in rest.split(separator: UInt8(ascii: "/")) {
            for top in [false, true] {
                let enc = S3Keys.encodeName(name, top: top)
                expect(S3Keys.decodeName(ArraySlice(enc.utf8)) == Array(name), "name \(Array(name)) encodes as \(enc)")
            }
        }
        _ = S3Remote.urlDecoded(key)
    }
}

// MARK: the S3 answers file (S3HeadCache+File)

enum FuzzS3Answers {
    static let identity = "http://127.0.0.1:8333 docs store"

    /// The input is the file after its magic line, without its checksum (the target adds both, so
    /// that the fuzzer reaches the records rather than the checksum's refusal).
    static func run(_ b: [UInt8]) {
        var file = S3HeadCache.fileMagic + b
        file += Array(SHA256Hash.of(file))
        let path = writeScratch("answers", file)
        let cache = S3HeadCache()
        guard let n = try? cache.read(from: path, identity: identity), n > 0 else { return }
        // What was kept is written and read again the same (one answer more, so that there is a
        // change to write: the answers just read are not written again).
        cache.keep(S3Remote.Head(etag: "e", size: 1, meta: RemoteMeta(), link: false, upload: nil), for: "\u{0}fuzz")
        let out = scratch + "/answers-again"
        _ = try? cache.write(to: out, identity: identity)
        let again = S3HeadCache()
        let m = try? again.read(from: out, identity: identity)
        expect(m == cache.count, "the answers file kept \(cache.count) answers, read again \(String(describing: m))")
    }
}

// MARK: the config file

enum FuzzConfig {
    static func run(_ b: [UInt8]) {
        let text = String(decoding: b, as: UTF8.self)
        guard let c = try? DriveConfig.parse(text, file: "config") else { return }
        _ = try? c.validate(file: "config")
        for s in c.stores {
            _ = s.uploadSettingsProblem()
            _ = s.remote
        }
        _ = c.topLevelNames
        // What `docdrive` writes back reads as the same config.
        let again = try? DriveConfig.parse(c.yaml(), file: "config")
        expect(again == c, "the config written back reads differently:\n\(c.yaml())")
    }
}

// MARK: bookmark tokens and reference files

enum FuzzTokens {
    static let key = DriveKey(bytes: Array(repeating: 7, count: 32))

    /// The first byte chooses: a token as it came (0), or the rest as a payload sealed with the
    /// drive's key (1), so that the payload's checks are reached past the MAC.
    static func token(_ b: [UInt8], purpose: TokenPurpose) -> String {
        guard b.first.map({ $0 & 1 == 1 }) == true else { return String(decoding: b.dropFirst(), as: UTF8.self) }
        return SealForFuzz.seal(Array(b.dropFirst()), purpose: purpose, key: key)
    }

    static func bookmark(_ b: [UInt8]) {
        let t = token(b, purpose: .bookmark)
        guard let p = try? SignedToken.open(t, as: BookmarkPayload.self, purpose: .bookmark, key: key) else { return }
        // As DocumentService.resolveBookmark uses it.
        _ = DriveFileSystem.appID(ofRootKey: p.root)
        _ = p.handle.flatMap { Data(base64Encoded: $0) }.map { [UInt8]($0) }
        _ = Names.isSafeRelativePath(p.path)
        _ = Date(timeIntervalSince1970: p.created)
        let again = try? SignedToken.open(SignedToken.seal(p, purpose: .bookmark, key: key), as: BookmarkPayload.self, purpose: .bookmark, key: key)
        expect(again == p, "bookmark \(p) sealed again opens as \(String(describing: again))")
    }

    static func reference(_ b: [UInt8]) {
        var t = Array(token(b, purpose: .reference).utf8)
        if b.count > 1, b[1] & 1 == 1 { t.append(0x0A) }
        _ = writeScratch("entry.docdrive-ref", t)
        let dir = open(scratch, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(dir) }
        guard let p = ReferenceLink.read(dir, "entry.docdrive-ref", key: key) else { return }
        _ = Data(base64Encoded: p.handle).map { [UInt8]($0) }
        _ = Names.isSafeRelativePath(p.hint)
        _ = p.rootKey
        let again = try? SignedToken.open(ReferenceLink.encode(p, key: key).dropLast().description, as: ReferencePayload.self, purpose: .reference, key: key)
        expect(again == p, "reference \(p) sealed again opens as \(String(describing: again))")
    }
}

// MARK: query expressions

enum FuzzQuery {
    static let parser: QueryParser = {
        var c = Calendar(identifier: .gregorian)
        c.timeZone = TimeZone(identifier: "UTC")!
        return QueryParser(now: Date(timeIntervalSince1970: 1_800_000_000), calendar: c)
    }()

    /// The arguments of the command line, NUL between them.
    static func run(_ b: [UInt8]) {
        let args = b.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        _ = try? parser.parse(args)
        // The front's request line (QueryWire) is read by the daemon as the same request.
        let q = ControlRequest.Query(expr: args, limit: b.count > 3 ? Int(b[0]) - 128 : nil, count: b.first == 1)
        let line = q.fastPathLine()
        let read = try? ControlRequest.decode(Data(line.utf8))
        expect(read == .query(q), "the fast path's line \(line.debugDescription) reads as \(String(describing: read))")
    }
}

// MARK: the control socket

enum FuzzControl {
    static func run(_ b: [UInt8]) {
        let line = Data(b)
        if let r = try? ControlRequest.decode(line) {
            // What the daemon then parses of it.
            if case .query(let q) = r { _ = try? FuzzQuery.parser.parse(q.expr) }
            if case .queryWatch(let q) = r { _ = try? FuzzQuery.parser.parse(q.expr) }
            // (A number that is not finite does not encode: the line is empty, as documented.)
            let written = r.line()
            let again = try? ControlRequest.decode(written)
            expect(written.count <= 1 || again == r, "request \(r) written again reads as \(String(describing: again))")
        }
        // The commands read the daemon's answers.
        _ = try? ControlAnswer<QueryAnswer>.decode(line)
        _ = try? ControlAnswer<SyncPollAnswer>.decode(line)
        _ = try? ControlAnswer<FillAnswer>.decode(line)
        _ = try? ControlAnswer<EvictAnswer>.decode(line)
        _ = try? ControlAnswer<GrantsAnswer>.decode(line)
        _ = try? ControlAnswer<DriveStatus>.decode(line)
        _ = try? ControlAnswer<ResolvedBookmark>.decode(line)
    }
}

// MARK: the status socket (file managers)

enum FuzzStatus {
    static func run(_ b: [UInt8]) {
        let text = String(decoding: b, as: UTF8.self)
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            _ = StatusRequest.parse(line)
            if let f = StatusProtocol.fields(line) {
                let back = StatusProtocol.fields(Substring(StatusProtocol.line(f).dropLast()))
                expect(back == f, "status fields \(f) written read as \(String(describing: back))")
            }
        }
    }
}

// MARK: the query fast path's raw answer (read by the `docdrive` front)

enum FuzzQueryWire {
    static func run(_ b: [UInt8]) {
        if let (mountpoint, fields) = QueryWire.parseRaw(b) {
            let answer = QueryWire.rawAnswer(mountpoint: String(decoding: mountpoint, as: UTF8.self), count: nil,
                                             paths: fields.map { String(decoding: $0, as: UTF8.self) })
            _ = QueryWire.parseRaw(answer)
        }
        // A string the front writes in JSON reads back as it.
        let s = String(decoding: b, as: UTF8.self)
        let json = QueryWire.jsonString(s)
        let back = try? JSONDecoder().decode(String.self, from: Data(json.utf8))
        expect(back == s, "jsonString(\(s.debugDescription)) = \(json) reads as \(String(describing: back))")
    }
}

// MARK: the drive home's JSON files (device.json, run/mount.json)

enum FuzzHomeJSON {
    static func run(_ b: [UInt8]) {
        let d = Data(b)
        if let dev = try? JSONDecoder().decode(DeviceIdentity.self, from: d) {
            _ = DeviceIdentity.clean(dev.name)
            _ = try? DeviceIdentity.checkedName(dev.name)
        }
        _ = try? JSONDecoder().decode(MountRecord.self, from: d)
        _ = DeviceIdentity.clean(String(decoding: b, as: UTF8.self))
    }
}

// MARK: /proc/self/mountinfo (mount points are any names a user gave)

enum FuzzMountInfo {
    static func run(_ b: [UInt8]) {
        _ = MountTable.parse(String(decoding: b, as: UTF8.self))
    }
}

// SwiftPM links an executable with `main` = `DocDriveFuzz_main` (so that tests can link it), so
// the program's main is this one, which hands over to libFuzzer's driver (what libFuzzer's own
// main does).
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                     _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

@_cdecl("DocDriveFuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return runFuzzerDriver(&argc, &argv) { data, size in fuzzOne(data, size) }
}
