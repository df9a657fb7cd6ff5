// S3KeysTests: the key encoding (reversible for every name, plain for ordinary ones), the
// metadata headers, where credentials come from, and the s3 remote in config.yaml. No server.
import DocDriveCore
import Foundation
import XCTest

final class S3KeysTests: XCTestCase {
    let keys = S3Keys(prefix: "/team/docs/")

    func testOrdinaryPathsAreTheirOwnKeys() throws {
        XCTAssertEqual(keys.keyPrefix, "team/docs/")
        XCTAssertEqual(try keys.key("Reports/q3.odt"), "team/docs/Reports/q3.odt")
        XCTAssertEqual(try keys.key("100%.txt"), "team/docs/100%.txt")
        XCTAssertEqual(try keys.key("Été/naïve ✓.md"), "team/docs/Été/naïve ✓.md")
        XCTAssertEqual(try keys.key("a/b", folder: true), "team/docs/a/b/")
        XCTAssertEqual(S3Keys(prefix: "").keyPrefix, "")
        XCTAssertEqual(try S3Keys(prefix: "").key("x"), "x")
    }

    func testNamesS3CannotHoldAreEscapedAndComeBack() throws {
        let latin1 = StorePath(bytes: Array("caf".utf8) + [0xE9] + Array(".txt".utf8))
        XCTAssertEqual(try keys.key(latin1), "team/docs/~dd~caf%E9.txt")
        XCTAssertEqual(try keys.key(StorePath(bytes: Array("a\u{01}b".utf8))), "team/docs/~dd~a%01b")
        XCTAssertEqual(try keys.key("~dd~x"), "team/docs/~dd~~dd~x")
        XCTAssertEqual(try keys.key(".docdrive-store"), "team/docs/~dd~.docdrive-store")
        XCTAssertEqual(try keys.key("sub/.docdrive-store"), "team/docs/sub/.docdrive-store")  // only the top is reserved
        XCTAssertEqual(try keys.key(StorePath(bytes: [0xE9] + Array("%é".utf8))), "team/docs/~dd~%E9%25é")
        for path in [latin1, StorePath(bytes: Array("a\u{01}b".utf8)), "~dd~x", ".docdrive-store", StorePath(bytes: [0xE9] + Array("%é".utf8))] {
            let k = try keys.key(path)
            XCTAssertEqual(keys.path(ofKey: k)?.path, path, k)
            XCTAssertEqual(keys.path(ofKey: k)?.folder, false)
        }
    }

    func testEveryNameRoundTrips() throws {
        // Given random names of random bytes (no "/" or NUL, not "." or ".."),
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<3000 {
            let n = Int.random(in: 1...12, using: &rng)
            var name = (0..<n).map { _ in UInt8.random(in: 1...255, using: &rng) }.map { $0 == UInt8(ascii: "/") ? UInt8(ascii: "x") : $0 }
            if name == [46] || name == [46, 46] { name.append(65) }
            let path = StorePath(bytes: Array("d/".utf8) + name)
            // when encoded, the key is valid UTF-8 without control characters, and it decodes to the same bytes.
            let key = try keys.key(path)
            XCTAssertFalse(key.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, key)
            XCTAssertEqual(keys.path(ofKey: key)?.path, path, "\(path) -> \(key)")
        }
    }

    func testTheStoresOwnObjectsAndForeignKeysAreNoPaths() {
        XCTAssertNil(keys.path(ofKey: "team/docs/.docdrive-store"))
        XCTAssertNil(keys.path(ofKey: "team/docs/.docdrive/uploads/abc/1"))
        XCTAssertNil(keys.path(ofKey: "team/other/x"))
        XCTAssertNil(keys.path(ofKey: "team/docs/"))
        XCTAssertNil(keys.path(ofKey: "team/docs/a//b"))
        XCTAssertNil(keys.path(ofKey: "team/docs/a/../b"))
        XCTAssertEqual(keys.path(ofKey: "team/docs/a/b/")?.folder, true)
        XCTAssertEqual(keys.path(ofKey: "team/docs/a/b/")?.path, "a/b")
    }

    func testAnotherToolsNameWithAControlCharacterIsUnshownNotMisread() throws {
        // Read as it is, "tab\tname" would be saved and deleted at ~dd~tab%09name, another key.
        for k in ["team/docs/tab\tname", "team/docs/a\nb/c.txt", "team/docs/d/\u{7F}", "team/docs/x\ry/"] {
            XCTAssertNil(keys.path(ofKey: k), k)
            XCTAssertTrue(keys.isUnshown(k), k)
        }
        // Its escaped form is shown, and names without control characters are as they were.
        let tab = StorePath(bytes: Array("tab\tname".utf8))
        XCTAssertEqual(keys.path(ofKey: try keys.key(tab))?.path, tab)
        XCTAssertFalse(keys.isUnshown(try keys.key(tab)))
        for k in ["team/docs/ok.txt", "team/docs/~dd~x", "team/docs/.docdrive-store", "team/other/tab\tname", "team/docs/a//b"] {
            XCTAssertFalse(keys.isUnshown(k), k)
        }
        XCTAssertEqual(keys.path(ofKey: "team/docs/sub/.docdrive-store")?.path, "sub/.docdrive-store")
    }

    func testPathsNoKeyCanHoldAreOneSentence() {
        let long = StorePath(String(repeating: "abcdefghij/", count: 100) + "x")
        XCTAssertThrowsError(try keys.key(long)) { e in
            XCTAssertEqual((e as? RemoteError)?.code, .invalidName)
            XCTAssertTrue("\(e)".contains("too long for S3"), "\(e)")
        }
    }

    func testMetadataTravelsAsHeaders() {
        let meta = RemoteMeta(itemID: "item-1", deviceID: "dev-9", deviceName: "Zoë's laptop", mtimeNanoseconds: 1_700_000_000_123_456_789, mode: 0o644,
                              origin: "12:1700000000.123456789:77 0123456789abcdef")
        let headers = S3Meta.headers(meta, link: true, upload: "tok")
        XCTAssertTrue(headers.allSatisfy { $0.1.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F } }, "\(headers)")
        let dict = Dictionary(headers, uniquingKeysWith: { a, _ in a })
        XCTAssertEqual(dict["x-amz-meta-docdrive-device-name"], "Zo%C3%AB's laptop")
        XCTAssertEqual(dict["x-amz-meta-docdrive-mode"], "644")
        XCTAssertEqual(dict["x-amz-meta-mtime"], "1700000000.123456789")
        XCTAssertEqual(dict["x-amz-meta-docdrive-origin"], "12:1700000000.123456789:77 0123456789abcdef")
        // Servers give the names back in other cases.
        let back = S3Meta.meta(headers.map { ($0.0.uppercased(), $0.1) })
        XCTAssertEqual(back.meta, meta)
        XCTAssertTrue(back.link)
        XCTAssertEqual(back.upload, "tok")
        // An object rclone wrote: its mtime is read.
        XCTAssertEqual(S3Meta.meta([("X-Amz-Meta-Mtime", "1700000000.5")]).meta.mtimeNanoseconds, 1_700_000_000_500_000_000)
    }

    // MARK: Credentials

    func testCredentialsFromTheEnvironmentAndFromProfiles() throws {
        let env = ["AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "AWS_SESSION_TOKEN": "tok"]
        let c = try SigV4.Credentials.load(credentialsFile: nil, environment: env, home: "/nonexistent")
        XCTAssertEqual(c.accessKeyID, "AKID")
        XCTAssertEqual(c.sessionToken, "tok")
        // A credentials value never prints its keys.
        XCTAssertFalse("\(c)".contains("s3cr3t"))
        XCTAssertFalse(String(reflecting: c).contains("s3cr3t"))
        var dumped = ""
        dump(c, to: &dumped)
        XCTAssertFalse(dumped.contains("s3cr3t"), dumped)

        let home = NSTemporaryDirectory() + "s3keys-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: home + "/.aws", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: home) }
        try "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n\n[profile work]\naws_access_key_id=W\naws_secret_access_key=WS\n"
            .write(toFile: home + "/.aws/credentials", atomically: true, encoding: .utf8)
        XCTAssertEqual(try SigV4.Credentials.load(credentialsFile: nil, environment: [:], home: home).accessKeyID, "D")
        XCTAssertEqual(try SigV4.Credentials.load(credentialsFile: nil, environment: ["AWS_PROFILE": "work"], home: home).secretAccessKey, "WS")
        XCTAssertThrowsError(try SigV4.Credentials.load(credentialsFile: nil, environment: ["AWS_PROFILE": "nope"], home: home)) { e in
            XCTAssertTrue("\(e)".contains("no profile [nope]"), "\(e)")
        }
    }

    func testACredentialsFileOthersCanReadIsRefused() throws {
        let file = NSTemporaryDirectory() + "s3creds-\(UUID().uuidString)"
        try "[default]\naws_access_key_id = F\naws_secret_access_key = FS\n".write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        chmod(file, 0o644)
        XCTAssertThrowsError(try SigV4.Credentials.load(credentialsFile: file, environment: ["AWS_ACCESS_KEY_ID": "E", "AWS_SECRET_ACCESS_KEY": "ES"])) { e in
            XCTAssertTrue("\(e)".contains("chmod 600"), "\(e)")
            XCTAssertFalse("\(e)".contains("FS"))
        }
        chmod(file, 0o600)
        // The store's file wins over the environment.
        XCTAssertEqual(try SigV4.Credentials.load(credentialsFile: file, environment: ["AWS_ACCESS_KEY_ID": "E", "AWS_SECRET_ACCESS_KEY": "ES"]).accessKeyID, "F")
    }

    // MARK: Config

    func testAnEndpointAtAnIPAddressOrLocalhostPutsTheBucketInThePath() {
        for e in ["http://127.0.0.1:8333", "http://10.0.0.12", "https://[::1]:9000", "http://localhost:9000", "http://LOCALHOST.", "http://minio.localhost"] {
            XCTAssertTrue(S3Settings(endpoint: e, bucket: "docs").usesPathStyle, e)
        }
        for e in ["https://s3.eu-west-1.amazonaws.com", "http://nas.local:9000", "http://1.2.3.4.example.com", "http://999a.1.2.3"] {
            XCTAssertFalse(S3Settings(endpoint: e, bucket: "docs").usesPathStyle, e)
            XCTAssertTrue(S3Settings(endpoint: e, bucket: "docs", pathStyle: true).usesPathStyle, e)
        }
    }

    func testAnS3RemoteInConfigYAML() throws {
        let text = """
        stores:
          - name: team
            display: Team
            remote: {type: s3, endpoint: "http://127.0.0.1:8333", bucket: docs, prefix: /work/, path-style: true, part-size: 8M, parallel-parts: 2}
        """
        let c = try DriveConfig.parse(text, file: "config.yaml")
        guard case .s3(let s) = c.stores[0].remote else { return XCTFail("not s3: \(c.stores[0].remote)") }
        XCTAssertEqual(s.endpoint, "http://127.0.0.1:8333")
        XCTAssertEqual(s.prefix, "work")
        XCTAssertEqual(s.region, "us-east-1")
        XCTAssertTrue(s.pathStyle)
        XCTAssertEqual(s.partSize, 8 << 20)
        XCTAssertEqual(s.parallelParts, 2)
        XCTAssertEqual(try DriveConfig.parse(c.yaml(), file: "again"), c)

        XCTAssertThrowsError(try DriveConfig.parse(text.replacingOccurrences(of: "bucket: docs", with: "bucket: Docs_1"), file: "config.yaml")) { e in
            XCTAssertTrue("\(e)".contains("line 4") && "\(e)".contains("bucket of store team"), "\(e)")
        }
        XCTAssertThrowsError(try DriveConfig.parse(text.replacingOccurrences(of: "http://127.0.0.1:8333", with: "127.0.0.1:8333"), file: "config.yaml")) { e in
            XCTAssertTrue("\(e)".contains("must be a URL"), "\(e)")
        }
        XCTAssertThrowsError(try DriveConfig.parse(text.replacingOccurrences(of: "part-size: 8M", with: "part-size: 1M"), file: "config.yaml")) { e in
            XCTAssertTrue("\(e)".contains("part-size"), "\(e)")
        }
    }
}
