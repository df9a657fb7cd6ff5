// RemoteMetaJSONTests: the metadata's own JSON reader and writer (Sync/RemoteMeta+JSON.swift)
// against Foundation's JSONDecoder and JSONEncoder, which devices of earlier versions use.
import DocDriveCore
import Foundation
import XCTest

final class RemoteMetaJSONTests: XCTestCase {
    private func fast(_ bytes: [UInt8]) -> RemoteMeta? {
        bytes.withUnsafeBytes { RemoteMeta.decodingCommonJSON($0) }
    }

    private func full(_ bytes: [UInt8]) -> RemoteMeta? {
        bytes.withUnsafeBytes { RemoteMeta.decodingJSON($0) }
    }

    private func foundation(_ bytes: [UInt8]) -> RemoteMeta? {
        try? JSONDecoder().decode(RemoteMeta.self, from: Data(bytes))
    }

    private static let pieces: [String] = [
        "a", "Z", "0", " ", "\"", "\\", "/", "\n", "\r", "\t", "\u{0}", "\u{1}", "\u{1F}", "\u{7F}",
        "é", "e\u{301}", "€", "日本", "😀", "\u{2028}", "\u{FFFD}", "-", ":", ".", "{", "}",
    ]

    private static func randomString(_ rng: inout SplitMix64) -> String {
        var s = ""
        for _ in 0..<Int.random(in: 0...12, using: &rng) { s += pieces.randomElement(using: &rng)! }
        return s
    }

    private static func randomMeta(_ rng: inout SplitMix64) -> RemoteMeta {
        func maybe<T>(_ make: () -> T) -> T? { Bool.random(using: &rng) ? make() : nil }
        let id = maybe { UUID().uuidString.lowercased() }
        let device = maybe { randomString(&rng) }
        let name = maybe { randomString(&rng) }
        let mtime = maybe { Int64.random(in: Int64.min...Int64.max, using: &rng) }
        let mode = maybe { UInt32.random(in: 0...UInt32.max, using: &rng) }
        let origin = maybe { randomString(&rng) }
        let parent = maybe { randomString(&rng) }
        return RemoteMeta(itemID: id, deviceID: device, deviceName: name, mtimeNanoseconds: mtime, mode: mode,
                          origin: origin, parent: parent)
    }

    private func seed(_ name: String) -> UInt64 {
        let seed = UInt64(ProcessInfo.processInfo.environment["DOCDRIVE_META_JSON_SEED"] ?? "") ?? UInt64.random(in: 0..<1_000_000)
        print("\(name) seed \(seed) (replay with DOCDRIVE_META_JSON_SEED=\(seed))")
        return seed
    }

    /// What either writer writes, either reader reads back equal; the reader here takes every
    /// form JSONEncoder writes (so a poll never falls back for what devices write).
    func testWhatEitherSideWritesTheOtherReadsEqual() throws {
        let s = seed("meta json round trip")
        var rng = SplitMix64(seed: s)
        let encoder = JSONEncoder()
        for n in 0..<3_000 {
            let meta = Self.randomMeta(&rng)
            let ours = meta.jsonBytes
            XCTAssertEqual(foundation(ours), meta, "JSONDecoder reading ours, case \(n), seed \(s): \(String(decoding: ours, as: UTF8.self))")
            XCTAssertEqual(fast(ours), meta, "ours reading ours, case \(n), seed \(s)")
            let theirs = Array(try encoder.encode(meta))
            XCTAssertEqual(fast(theirs), meta, "ours reading JSONEncoder's, case \(n), seed \(s): \(String(decoding: theirs, as: UTF8.self))")
        }
    }

    /// Text changed at random: where the reader here answers, JSONDecoder gives the same; where
    /// it does not, the full read is JSONDecoder's answer.
    func testTheReaderAnswersOnlyAsJSONDecoderWould() throws {
        let s = seed("meta json mutations")
        var rng = SplitMix64(seed: s)
        let encoder = JSONEncoder()
        let inserts = Array("{}[]\",:\\/ \n\t-.0123456789eEnulltruefalse\u{1}éx".utf8) + [0xFF, 0xC3, 0x80]
        var answered = 0, differed = 0
        for n in 0..<6_000 {
            var bytes = Bool.random(using: &rng) ? Self.randomMeta(&rng).jsonBytes : Array(try encoder.encode(Self.randomMeta(&rng)))
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let at = Int.random(in: 0...bytes.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: bytes.insert(inserts.randomElement(using: &rng)!, at: at)
                case 1: if at < bytes.count { bytes.remove(at: at) }
                default: if at < bytes.count { bytes[at] = inserts.randomElement(using: &rng)! }
                }
            }
            let reference = foundation(bytes)
            if let ours = fast(bytes) {
                answered += 1
                XCTAssertEqual(ours, reference, "case \(n), seed \(s): \(String(decoding: bytes, as: UTF8.self))")
            }
            if full(bytes) != reference { differed += 1 }
        }
        XCTAssertEqual(differed, 0, "the full read differs from JSONDecoder's (seed \(s))")
        // The mutations must also make text the reader takes, or this test would show nothing.
        XCTAssertGreaterThan(answered, 300, "seed \(s)")
    }

    func testFormsLeftToJSONDecoder() {
        let cases: [(String, RemoteMeta?)] = [
            (#"{"itemID":"a","future":[1,{"x":2}]}"#, RemoteMeta(itemID: "a")),  // a key another version added
            (#"{"mode":420.0}"#, nil),
            (#"{"mode":4.2e2}"#, nil),
            (#"{"itemID":"a","itemID":"b"}"#, nil),
            (#"{"itemID":"\ud800"}"#, nil),
            (#"{"mode":-1}"#, nil),
            (#"{"mode":4294967296}"#, nil),
            (#"{"mtimeNanoseconds":9223372036854775808}"#, nil),
            (#"{"itemID":"a"} x"#, nil),
        ]
        for (text, _) in cases {
            XCTAssertNil(fast(Array(text.utf8)), "the reader here took \(text)")
        }
        for (text, expected) in cases {
            XCTAssertEqual(full(Array(text.utf8)), foundation(Array(text.utf8)), text)
            if let expected { XCTAssertEqual(full(Array(text.utf8)), expected, text) }
        }
        // And forms it takes itself.
        XCTAssertEqual(fast(Array(#" { "itemID" : "x\u00e9\n\ud83d\ude00" , "mode" : null , "mtimeNanoseconds" : -9223372036854775808 } "#.utf8)),
                       RemoteMeta(itemID: "xé\n😀", mtimeNanoseconds: Int64.min))
        XCTAssertEqual(fast(Array("{}".utf8)), RemoteMeta())
    }
}
