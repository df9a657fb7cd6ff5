// S3JournalTests: the journal's format (Sync/Remote/S3/S3Journal.swift, RemoteJournal.swift):
// what one device writes another reads back, hostile objects are refused with a sentence, and
// a reader's cursor and the server's clock.
import DocDriveCore
import Foundation
import XCTest

final class S3JournalTests: XCTestCase {
    let keys = S3Keys(prefix: "team/docs")

    /// A batch of every kind of change, with names S3 cannot hold as they are, reads back as
    /// it was written.
    func testABatchRoundTrips() throws {
        let batch = JournalBatch(device: "0123456789abcdef0123456789abcdef", deviceName: "laptop", changes: [
            JournalChange(.put, "A/b.txt", id: "5f0c6a8e-6d0b-4d1e-9a52-2b1a4b1c8d00", version: "abc", previous: "def"),
            JournalChange(.move, "B/b.txt", from: "A/b.txt", id: "5f0c6a8e-6d0b-4d1e-9a52-2b1a4b1c8d00", version: "abc"),
            JournalChange(.delete, "C", previous: "x"),
            JournalChange(.put, StorePath(bytes: Array("nul\u{1}name/.docdrive".utf8))),
            JournalChange(.put, StorePath(bytes: [0x66, 0xFF, 0x2E, 0x74])),  // not UTF-8
        ])
        let body = S3JournalFormat.encode(batch, keys: keys)
        XCTAssertEqual(try S3JournalFormat.decode(body, keys: keys), batch)
        XCTAssertTrue(String(decoding: body, as: UTF8.self).hasPrefix("{\"changes\":[{\"id\""), String(decoding: body, as: UTF8.self))
        var whole = batch
        whole.changes = []
        whole.whole = true
        XCTAssertEqual(try S3JournalFormat.decode(S3JournalFormat.encode(whole, keys: keys), keys: keys), whole)
    }

    /// What is not a journal object this version writes is refused with a sentence, never read
    /// as changes: another format, paths that lead out of the store or into its own objects,
    /// fields out of bounds, a move without a source.
    func testHostileObjectsAreRefused() {
        func refusal(_ json: String) -> String? {
            do {
                _ = try S3JournalFormat.decode(Array(json.utf8), keys: keys)
                return nil
            } catch {
                return error.why
            }
        }
        let good = #"{"format":"docdrive-journal 1","device":"d1","changes":[{"op":"put","path":"a.txt"}]}"#
        XCTAssertNil(refusal(good))
        let cases: [(String, String)] = [
            ("not json", "not a journal object"),
            (#"{"format":"docdrive-journal 2","device":"d1","changes":[]}"#, "its format"),
            (#"{"format":"docdrive-journal 1","device":"","changes":[]}"#, "device id"),
            (#"{"format":"docdrive-journal 1","device":"a/b","changes":[]}"#, "device id"),
            (#"{"format":"docdrive-journal 1","device":"d1","changes":[{"op":"put","path":"../x"}]}"#, "no path of the store"),
            (#"{"format":"docdrive-journal 1","device":"d1","changes":[{"op":"put","path":"a/../../x"}]}"#, "no path of the store"),
            (#"{"format":"docdrive-journal 1","device":"d1","changes":[{"op":"put","path":".docdrive/changes"}]}"#, "no path of the store"),
            (#"{"format":"docdrive-journal 1","device":"d1","changes":[{"op":"put","path":""}]}"#, "no path of the store"),
            (#"{"format":"docdrive-journal 1","device":"d1","changes":[{"op":"rm","path":"a"}]}"#, "no operation"),
            (#"{"format":"docdrive-journal 1","device":"d1","changes":[{"op":"move","path":"a"}]}"#, "without a source"),
            (#"{"format":"docdrive-journal 1","device":"d1","changes":[{"op":"put","path":"a","from":"b"}]}"#, "with a source"),
            ("{\"format\":\"docdrive-journal 1\",\"device\":\"d1\",\"changes\":[{\"op\":\"put\",\"path\":\"a\",\"id\":\"\(String(repeating: "i", count: 300))\"}]}", "longer than 256"),
        ]
        for (json, expected) in cases {
            let why = refusal(json)
            XCTAssertNotNil(why, json)
            XCTAssertTrue(why?.contains(expected) ?? false, "\(json): \(why ?? "accepted")")
        }
        let many = "{\"format\":\"docdrive-journal 1\",\"device\":\"d1\",\"changes\":[" + Array(repeating: #"{"op":"delete","path":"a"}"#, count: S3JournalFormat.maxChanges + 1).joined(separator: ",") + "]}"
        XCTAssertTrue(refusal(many)?.contains("more than") ?? false)
    }

    /// Journal names sort by time and carry the device; a reader's cursor lists again from a
    /// window before the newest time it read, and keeps only the keys applied within it.
    func testNamesAndTheCursor() {
        let n1 = JournalKey.name(time: 1_794_000_000_000, device: "dev-a", seq: 1)
        let n2 = JournalKey.name(time: 1_794_000_000_001, device: "dev-b", seq: 7)
        XCTAssertEqual(n1, "1794000000000-dev-a-0000000001")
        XCTAssertLessThan(n1, n2)
        XCTAssertLessThan(JournalKey.first(atTime: 1_794_000_000_000), n1, "a listing from a time starts before its names")
        XCTAssertEqual(JournalKey.time(of: n2), 1_794_000_000_001)
        XCTAssertEqual(JournalKey.device(of: n2), "dev-b")
        XCTAssertNil(JournalKey.time(of: "notes.txt"))
        XCTAssertNil(JournalKey.device(of: "1794000000000-"))
        let old = JournalKey.name(time: 1_794_000_000_000 - JournalCursor.window - 5, device: "dev-a", seq: 1)
        let c = JournalCursor(time: 1_000, applied: [old]).advanced(by: [(n1, 1_794_000_000_000), (n2, 1_794_000_000_001)])
        XCTAssertEqual(c.time, 1_794_000_000_001)
        XCTAssertEqual(c.applied, [n1, n2], "a key older than the window is forgotten")
        XCTAssertEqual(c.listFrom, 1_794_000_000_001 - JournalCursor.window)
        XCTAssertEqual(c.advanced(by: []).time, c.time, "nothing read: the cursor stays")
    }

    /// The server's `Date` is read as the time it says (the journal's names are dated by it).
    func testTheServersDateIsRead() {
        XCTAssertEqual(S3ServerClock.milliseconds(httpDate: "Sun, 06 Nov 1994 08:49:37 GMT"), 784_111_777_000)
        XCTAssertEqual(S3ServerClock.milliseconds(httpDate: "Thu, 01 Jan 1970 00:00:00 GMT"), 0)
        XCTAssertEqual(S3ServerClock.milliseconds(httpDate: "Mon, 29 Feb 2016 12:00:00 GMT"), 1_456_747_200_000)
        for bad in ["", "Sun, 06 Nov 1994 08:49:37", "Sun, 36 Nov 1994 08:49:37 GMT", "Sun, 06 Xyz 1994 08:49:37 GMT", "Sun, 06 Nov 1994 25:00:00 GMT"] {
            XCTAssertNil(S3ServerClock.milliseconds(httpDate: bad), bad)
        }
        let clock = S3ServerClock()
        XCTAssertNil(clock.now)
        clock.saw("Sun, 06 Nov 1994 08:49:37 GMT")
        XCTAssertGreaterThanOrEqual(clock.now ?? 0, 784_111_777_000)
        XCTAssertLessThan(clock.now ?? 0, 784_111_777_000 + 5_000)
    }
}
