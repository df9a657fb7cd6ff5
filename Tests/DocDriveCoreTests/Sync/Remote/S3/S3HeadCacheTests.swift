// S3HeadCacheTests: the HEAD answers an S3 remote keeps, packed (Sync/S3HeadCache*.swift): every
// answer comes back exactly as it was kept, whatever the form of its strings, in memory and
// through the answers file. No server is needed.
import DocDriveCore
import Foundation
import XCTest

final class S3HeadCacheTests: XCTestCase {
    /// A string of one of the forms the cache packs in its value's bytes, of a form next to one
    /// (a digit too many or too few, upper case, a dash missing), or anything else.
    private func string(_ g: inout SplitMix64) -> String? {
        func hex(_ n: Int, _ digits: String = "0123456789abcdef") -> String {
            String((0..<n).map { _ in digits.randomElement(using: &g)! })
        }
        func uuid() -> String { "\(hex(8))-\(hex(4))-\(hex(4))-\(hex(4))-\(hex(12))" }
        switch Int.random(in: 0..<18, using: &g) {
        case 0: return nil
        case 1: return ""
        case 2, 3: return hex(32)
        case 4: return hex(32, "0123456789ABCDEF")
        case 5: return hex(31)
        case 6: return hex(33)
        case 7: return hex(32) + "-3"  // a multipart ETag
        case 8, 9: return uuid()
        case 10: return uuid().uppercased()
        case 11: return uuid().replacingOccurrences(of: "-", with: "")
        case 12: return String(uuid().dropLast()) + "g"
        case 13: return hex(14, "0123456789")
        case 14: return hex(13, "0123456789")
        case 15: return hex(13, "0123456789") + "x"
        case 16: return "none"
        default: return "Zoë's \u{0} laptop " + hex(Int.random(in: 0..<300, using: &g))
        }
    }

    private func head(_ g: inout SplitMix64, devices: Int) -> S3Remote.Head {
        let device = "device-\(Int.random(in: 0..<devices, using: &g))"
        let meta = RemoteMeta(itemID: string(&g), deviceID: Bool.random(using: &g) ? device : string(&g),
                              deviceName: Bool.random(using: &g) ? device + " name" : string(&g),
                              mtimeNanoseconds: Bool.random(using: &g) ? Int64.random(in: .min ... .max, using: &g) : nil,
                              mode: Bool.random(using: &g) ? UInt32.random(in: 0 ... .max, using: &g) : nil,
                              origin: string(&g), parent: string(&g))
        return S3Remote.Head(etag: string(&g) ?? "", size: Bool.random(using: &g) ? Int64.random(in: 0..<100, using: &g) : Int64.random(in: .min ... .max, using: &g),
                             meta: meta, link: Bool.random(using: &g), upload: string(&g),
                             modified: string(&g), answered: string(&g))
    }

    private func assertSame(_ a: S3Remote.Head?, _ b: S3Remote.Head?, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let a, let b else {
            XCTAssertEqual(a == nil, b == nil, "\(what): one answer is missing", file: file, line: line)
            return
        }
        XCTAssertEqual(a.etag, b.etag, what, file: file, line: line)
        XCTAssertEqual(a.size, b.size, what, file: file, line: line)
        XCTAssertEqual(a.meta, b.meta, what, file: file, line: line)
        XCTAssertEqual(a.link, b.link, what, file: file, line: line)
        XCTAssertEqual(a.upload, b.upload, what, file: file, line: line)
        XCTAssertEqual(a.modified, b.modified, what, file: file, line: line)
        XCTAssertEqual(a.answered, b.answered, what, file: file, line: line)
    }

    /// Random keeps, replacements and forgets agree with a Dictionary of the answers as kept:
    /// every answer comes back equal field by field (strings of every form, missing fields
    /// missing), is found by its ETag and by no other, and the answers file brings back the
    /// same. More device names than the cache shares (4,096) go inline and come back too.
    func testEveryAnswerComesBackExactlyAsItWasKept() throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["DOCDRIVE_HEADS_SEED"] ?? "") ?? UInt64.random(in: 0..<1_000_000)
        print("head cache seed \(seed) (replay with DOCDRIVE_HEADS_SEED=\(seed))")
        var g = SplitMix64(seed: seed)
        let cache = S3HeadCache()
        var model = [String: S3Remote.Head]()
        let keys = (0..<3000).map { i in i % 7 == 0 ? "dir/Ünïcode \(i)" : "docs/file-\(i).txt" } + [""]
        for step in 0..<20_000 {
            let key = keys.randomElement(using: &g)!
            if Int.random(in: 0..<5, using: &g) == 0 {
                cache.forget(key)
                model[key] = nil
            } else {
                let h = head(&g, devices: step < 10_000 ? 50 : 6000)
                let kept = cache.keep(h, for: key)
                assertSame(kept, h, "keep returns the answer (seed \(seed), step \(step))")
                model[key] = h
            }
            if step % 97 == 0 {
                let probe = keys.randomElement(using: &g)!
                assertSame(cache[probe], model[probe], "answer of \(probe) (seed \(seed), step \(step))")
            }
        }
        XCTAssertEqual(cache.count, model.count, "seed \(seed)")
        for key in keys {
            assertSame(cache[key], model[key], "answer of \(key) (seed \(seed))")
            guard let h = model[key] else { continue }
            assertSame(cache.answer(for: key, etag: h.etag), h, "answer of \(key) by its ETag (seed \(seed))")
            for other in [h.etag + "0", h.etag.uppercased() == h.etag ? h.etag.lowercased() : h.etag.uppercased(), String(h.etag.dropLast())] where other != h.etag {
                XCTAssertNil(cache.answer(for: key, etag: other), "\(key) found by the ETag \(other) (seed \(seed))")
            }
        }

        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("heads-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("answers").path
        XCTAssertEqual(try cache.write(to: file, identity: "remote"), model.count)
        let again = S3HeadCache()
        XCTAssertEqual(try again.read(from: file, identity: "remote"), model.count)
        for key in keys { assertSame(again[key], model[key], "answer of \(key) read back from the file (seed \(seed))") }
    }
}
