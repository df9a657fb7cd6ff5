// SignedTokenTests: sealed tokens open only with the right key and purpose; thousands of
// random and mutated tokens are all refused, and none crashes the parser.
import DocDriveCore
import Foundation
import XCTest

final class SignedTokenTests: XCTestCase {
    let key = DriveKey(bytes: (0..<32).map { UInt8($0) })
    let otherKey = DriveKey(bytes: (0..<32).map { UInt8(255 - $0) })
    let payload = BookmarkPayload(app: "org.example.notes", root: "store:work", item: "6f1c2a2e-0000-4000-8000-000000000001",
                                  path: "Work/report.odt", created: 1_790_000_000)

    func token() -> String { SignedToken.seal(payload, purpose: .bookmark, key: key) }

    func refused(_ t: String, key k: DriveKey? = nil, purpose: TokenPurpose = .bookmark, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try SignedToken.open(t, as: BookmarkPayload.self, purpose: purpose, key: k ?? key), file: file, line: line) { e in
            XCTAssertEqual((e as? DriveError)?.code, .invalidToken, file: file, line: line)
        }
    }

    func testRoundTripIsURLSafe() throws {
        let t = token()
        XCTAssertEqual(try SignedToken.open(t, as: BookmarkPayload.self, purpose: .bookmark, key: key), payload)
        XCTAssertTrue(t.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) || "-_.".unicodeScalars.contains($0) }, t)
    }

    func testAnotherDrivesKeyOrPurposeIsRefused() {
        refused(token(), key: otherKey)
        refused(token(), purpose: .reference)
        refused(SignedToken.seal(payload, purpose: .reference, key: key))
    }

    func testForgedPayloadWithOldMACIsRefused() {
        // Given a genuine token whose payload is swapped for one naming another item
        var other = payload
        other.item = "6f1c2a2e-0000-4000-8000-000000000002"
        let forged = SignedToken.seal(other, purpose: .bookmark, key: otherKey)
        let genuine = token()
        let mixed = String(forged.split(separator: ".")[0]) + "." + String(genuine.split(separator: ".")[1])
        // Then it is refused
        refused(mixed)
    }

    func testEveryTruncationAndEverySingleCharacterChangeIsRefused() {
        let t = Array(token())
        for n in 0..<t.count { refused(String(t[0..<n])) }
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ \u{0}é")
        for i in t.indices {
            for c in [alphabet[i % alphabet.count], alphabet[(i * 7 + 3) % alphabet.count]] where c != t[i] {
                var m = t
                m[i] = c
                refused(String(m))
            }
        }
    }

    func testThousandsOfRandomAndMutatedTokensAreRefusedWithoutACrash() {
        var rng = SplitMix64(seed: 42)
        let base = Array(token().utf8)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.".utf8)
        for round in 0..<3000 {
            var bytes: [UInt8]
            switch round % 4 {
            case 0:  // random text in the token alphabet, with a dot somewhere
                bytes = (0..<Int(rng.next() % 200)).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }
            case 1:  // random bytes, any value
                bytes = (0..<Int(rng.next() % 300)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            case 2:  // a genuine token with a few bytes changed
                bytes = base
                for _ in 0..<(1 + Int(rng.next() % 4)) {
                    let i = Int(rng.next() % UInt64(bytes.count))
                    let v = alphabet[Int(rng.next() % UInt64(alphabet.count))]
                    bytes[i] = v == bytes[i] ? (v == 65 ? 66 : 65) : v
                }
            default:  // a genuine token spliced with random material
                let cut = Int(rng.next() % UInt64(base.count))
                bytes = Array(base[0..<cut]) + (0..<Int(rng.next() % 40)).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }
            }
            refused(String(decoding: bytes, as: UTF8.self))
        }
        refused(String(repeating: "A", count: SignedToken.maxLength + 1))
    }

    func testKeyFileMustBePrivateAndWellFormed() throws {
        let home = DriveHome(path: NSTemporaryDirectory() + "dd-key-\(UUID().uuidString)")
        try home.initialize(with: DriveConfig())
        defer { try? FileManager.default.removeItem(atPath: home.path) }
        let k = try DriveKey.load(from: home)
        XCTAssertEqual(try SignedToken.open(SignedToken.seal(payload, purpose: .bookmark, key: k), as: BookmarkPayload.self, purpose: .bookmark, key: k), payload)
        chmod(home.keyPath, 0o644)
        XCTAssertThrowsError(try DriveKey.load(from: home))
        chmod(home.keyPath, 0o600)
        try "not hex\n".write(toFile: home.keyPath, atomically: false, encoding: .utf8)
        XCTAssertThrowsError(try DriveKey.load(from: home))
    }
}

/// A small deterministic generator, so a failure can be replayed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
