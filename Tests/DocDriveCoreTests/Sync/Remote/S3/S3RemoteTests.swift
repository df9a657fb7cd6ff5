// S3RemoteTests: the S3 remote against a real S3 server (SeaweedFS, started by
// `Tests/s3/weed.py run -- swift test ...`, which sets DOCDRIVE_S3_ENDPOINT): conditional
// writes and deletes, moves, paging, names S3 cannot hold, multipart uploads with flat memory,
// a wrong key, and curl (a client nobody here wrote) reading what it wrote. In CI a missing
// server fails the tests; elsewhere they are skipped with the reason.
import Crypto
import DocDriveCore
import Foundation
import Synchronization
import XCTest

final class S3RemoteTests: XCTestCase {
    static let env = ProcessInfo.processInfo.environment

    var endpoint = ""
    var bucket = ""
    var files = [String]()

    override func setUpWithError() throws {
        guard let e = Self.env["DOCDRIVE_S3_ENDPOINT"], !e.isEmpty else {
            let why = "DOCDRIVE_S3_ENDPOINT is not set: run `python3 Tests/s3/weed.py run -- swift test -c release --skip-build --filter S3`"
            if Self.env["CI"] == "true" {
                XCTFail(why)
                throw XCTSkip("failed above")
            }
            throw XCTSkip(why)
        }
        endpoint = e
        bucket = Self.env["DOCDRIVE_S3_BUCKET"] ?? "docdrive-test"
    }

    override func tearDown() {
        for f in files { unlink(f) }
    }

    /// A remote on a prefix of its own.
    func makeRemote(prefix: String? = nil, secret: String? = nil, partSize: Int64 = S3Settings.defaultPartSize, parallel: Int = 4,
                    pageSize: Int = 1000, attempts: Int = 6) throws -> S3Remote {
        let settings = S3Settings(endpoint: endpoint, bucket: bucket, prefix: prefix ?? "t-\(UUID().uuidString.prefix(8))", pathStyle: true,
                                  partSize: partSize, parallelParts: parallel)
        let c = SigV4.Credentials(accessKeyID: Self.env["AWS_ACCESS_KEY_ID"] ?? "", secretAccessKey: secret ?? Self.env["AWS_SECRET_ACCESS_KEY"] ?? "")
        let client = try S3Client(settings: settings, credentials: c, retry: S3RetryPolicy(attempts: attempts, baseDelay: 0.05, maxDelay: 0.5))
        return S3Remote(client: client, device: "testdevice", pageSize: pageSize)
    }

    /// A local file holding `bytes`, opened for reading.
    func file(_ bytes: [UInt8]) throws -> Int32 {
        let path = NSTemporaryDirectory() + "s3remote-\(UUID().uuidString)"
        files.append(path)
        FileManager.default.createFile(atPath: path, contents: Data(bytes))
        let fd = open(path, O_RDONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        return fd
    }

    func put(_ r: S3Remote, _ path: StorePath, _ text: String, expecting: RemoteExpectation = .absent, meta: RemoteMeta = RemoteMeta()) throws -> RemoteItem {
        let fd = try file(Array(text.utf8))
        defer { close(fd) }
        return try r.upload(from: fd, to: path, expecting: expecting, meta: meta, limit: nil, progress: nil)
    }

    func get(_ r: S3Remote, _ path: StorePath, version: String? = nil) throws -> (RemoteItem, [UInt8]) {
        let p = NSTemporaryDirectory() + "s3get-\(UUID().uuidString)"
        files.append(p)
        let fd = open(p, O_RDWR | O_CREAT, 0o600)
        defer { close(fd) }
        let item = try r.download(path, version: version, to: fd, progress: nil)
        return (item, Array(FileManager.default.contents(atPath: p) ?? Data()))
    }

    func assertCode(_ code: RemoteError.Code, _ body: () throws -> Void, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try body(), file: file, line: line) { e in
            XCTAssertEqual((e as? RemoteError)?.code, code, "\(e)", file: file, line: line)
        }
    }

    // MARK: Conditional writes

    func testTheServerHonoursConditionalWrites() throws {
        let r = try makeRemote()
        let caps = try r.probeConditionalWrites()
        XCTAssertTrue(caps.conditionalDelete)
        XCTAssertEqual(try r.objectKeys(), [], "the probe leaves nothing behind")
    }

    func testACreateIsRefusedTheSecondTime() throws {
        let r = try makeRemote()
        let meta = RemoteMeta(itemID: "id-1", deviceID: "dev", deviceName: "Zoë", mtimeNanoseconds: 1_700_000_000_000_000_001, mode: 0o640)
        let first = try put(r, "a.txt", "one", meta: meta)
        XCTAssertFalse(first.version.isEmpty)
        assertCode(.changed) { _ = try put(r, "a.txt", "two") }
        let (item, bytes) = try get(r, "a.txt")
        XCTAssertEqual(bytes, Array("one".utf8))
        XCTAssertEqual(item.version, first.version)
        // (and the version it was written over: none)
        var written = meta
        written.parent = RemoteMeta.created
        XCTAssertEqual(item.meta, written)
        XCTAssertEqual(try r.item(at: "a.txt")?.meta, written)
    }

    func testAReplaceOnAStaleVersionIsRefused() throws {
        let r = try makeRemote()
        let v1 = try put(r, "doc.md", "version 1")
        let v2 = try put(r, "doc.md", "version 2 from device A", expecting: .version(v1.version))
        XCTAssertNotEqual(v1.version, v2.version)
        // Each names the version it was written over, as another device reads it.
        XCTAssertEqual(v2.meta.parent, v1.version)
        XCTAssertEqual(try makeRemote(prefix: r.keys.prefix).item(at: "doc.md")?.meta.parent, v1.version)
        // Device B still thinks v1 is there.
        assertCode(.changed) { _ = try put(r, "doc.md", "version 2 from device B", expecting: .version(v1.version)) }
        XCTAssertEqual(try get(r, "doc.md").1, Array("version 2 from device A".utf8))
        // A download of a version that is gone says so.
        assertCode(.changed) { _ = try get(r, "doc.md", version: v1.version) }
        // A replace of something deleted meanwhile is refused too.
        try r.delete("doc.md", version: v2.version)
        assertCode(.changed) { _ = try put(r, "doc.md", "again", expecting: .version(v2.version)) }
        assertCode(.notFound) { _ = try get(r, "doc.md") }
    }

    func testADeleteIsConditional() throws {
        let r = try makeRemote()
        let v1 = try put(r, "x", "1")
        let v2 = try put(r, "x", "22", expecting: .version(v1.version))
        assertCode(.changed) { try r.delete("x", version: v1.version) }
        XCTAssertEqual(try r.item(at: "x")?.version, v2.version)
        try r.delete("x", version: v2.version)
        XCTAssertNil(try r.item(at: "x"))
        try r.delete("x", version: v2.version)  // gone already: fine
        // A folder goes only when empty.
        _ = try r.makeFolder("f", meta: RemoteMeta())
        let inside = try put(r, "f/in", "i")
        assertCode(.changed) { try r.delete("f", version: "") }
        try r.delete("f/in", version: inside.version)
        try r.delete("f", version: "")
        XCTAssertNil(try r.item(at: "f"))
    }

    func testFoldersAndLinks() throws {
        let r = try makeRemote()
        XCTAssertEqual(try r.makeFolder("Empty", meta: RemoteMeta(itemID: "fid")).kind, .folder)
        XCTAssertEqual(try r.makeFolder("Empty", meta: RemoteMeta()).kind, .folder)  // twice: fine
        let link = try r.makeSymlink(Array("../target.txt".utf8), at: "Empty/link", expecting: .absent, meta: RemoteMeta(itemID: "lid"))
        XCTAssertEqual(link.kind, .symlink)
        XCTAssertTrue(try r.objectKeys().contains(r.keys.key("Empty", folder: true)))
        // A listing by another remote (no cache) finds the link's kind and metadata.
        let other = try makeRemote(prefix: r.keys.prefix)
        let items = try other.list()
        XCTAssertEqual(items.map(\.path), ["Empty", "Empty/link"])
        XCTAssertEqual(items.map(\.kind), [.folder, .symlink])
        XCTAssertEqual(items[1].meta.itemID, "lid")
        XCTAssertEqual(try other.get("Empty/link").1, Array("../target.txt".utf8))
        XCTAssertEqual(try other.item(at: "Empty")?.kind, .folder)
    }

    // MARK: Moves

    func testMoveOfAFileAndOfAFolder() throws {
        let r = try makeRemote()
        let a = try put(r, "a.txt", "A", meta: RemoteMeta(itemID: "ida"))
        let moved = try r.move("a.txt", version: a.version, to: "b.txt")
        XCTAssertEqual(moved.path, "b.txt")
        XCTAssertEqual(moved.meta.itemID, "ida", "the metadata moves along")
        XCTAssertNil(try r.item(at: "a.txt"))
        // A stale version is not moved; nor onto something that is there.
        assertCode(.changed) { _ = try r.move("b.txt", version: a.version + "0", to: "c.txt") }
        let c = try put(r, "c.txt", "C")
        assertCode(.changed) { _ = try r.move("b.txt", version: moved.version, to: "c.txt") }
        XCTAssertEqual(try get(r, "c.txt").1, Array("C".utf8))
        _ = c
        // A folder moves with everything in it, including folders only implied by keys.
        _ = try r.makeFolder("D", meta: RemoteMeta())
        _ = try put(r, "D/one", "1")
        _ = try put(r, "D/sub/two", "2")
        _ = try put(r, "Taken/x", "x")
        assertCode(.changed) { _ = try r.move("D", version: "", to: "Taken") }
        XCTAssertEqual(try r.objectKeys().filter { $0.hasPrefix(r.keys.keyPrefix + "Taken/") }, [r.keys.keyPrefix + "Taken/x"], "nothing was copied")
        try r.delete("Taken/x", version: try XCTUnwrap(try r.item(at: "Taken/x")).version)
        _ = try r.move("D", version: "", to: "E")
        XCTAssertEqual(try r.list().map(\.path), ["E", "E/one", "E/sub", "E/sub/two", "b.txt", "c.txt"])
        XCTAssertEqual(try get(r, "E/sub/two").1, Array("2".utf8))
    }

    func testAMoveOfAFileTooLargeForOneCopyGoesInPartsWithItsBytesAndMetadata() throws {
        // S3's single copy takes at most 5 GiB; larger objects are copied in parts. The same
        // code, with parts of 5 MiB above 16 MiB (files up to 16 MiB are rewritten, not copied).
        let base = try makeRemote()
        let r = S3Remote(client: base.client, device: "testdevice", copyInPartsAbove: 16 << 20, copyPartSize: 5 << 20)
        var bytes = [UInt8](repeating: 0, count: (17 << 20) + 3)
        for i in stride(from: 0, to: bytes.count, by: 4096) { bytes[i] = UInt8(truncatingIfNeeded: i >> 12 &* 31 &+ 7) }
        bytes[bytes.count - 1] = 0xEE
        let fd = try file(bytes)
        defer { close(fd) }
        let meta = RemoteMeta(itemID: "big-id", deviceName: "laptop", mtimeNanoseconds: 1_700_000_000_123_456_789, mode: 0o640)
        let a = try r.upload(from: fd, to: "big.bin", expecting: .absent, meta: meta, limit: nil, progress: nil)
        let moved = try r.move("big.bin", version: a.version, to: "F/moved.bin")
        XCTAssertNil(try r.item(at: "big.bin"))
        // every byte, in 4 parts (a multipart object's ETag ends with its part count; a single
        // server copy would have kept the source's, made of 2 parts of 16 MiB)
        let (item, got) = try get(r, "F/moved.bin")
        XCTAssertEqual(got.count, bytes.count)
        XCTAssertTrue(got == bytes, "the copy differs from the file")
        XCTAssertTrue(item.version.hasSuffix("-4"), "copied in \(item.version), not in 4 parts")
        XCTAssertNotEqual(item.version, a.version)
        // and the item's metadata went along: its id, device, time and mode
        let now = try XCTUnwrap(try r.item(at: "F/moved.bin"))
        XCTAssertEqual(moved.version, now.version)
        for m in [moved.meta, now.meta] {
            XCTAssertEqual(m.itemID, "big-id")
            XCTAssertEqual(m.deviceName, "laptop")
            XCTAssertEqual(m.mtimeNanoseconds, 1_700_000_000_123_456_789)
            XCTAssertEqual(m.mode, 0o640)
        }
        // a move of a version that is not the object's any more is refused, nothing copied
        assertCode(.changed) { _ = try r.move("F/moved.bin", version: a.version, to: "G/again.bin") }
        XCTAssertNil(try r.item(at: "G/again.bin"))
    }

    func testAMoveOntoANameAnotherDeviceCreatesAtThatMomentNeverReplacesItsFile() throws {
        let mover = try makeRemote()
        let creator = try makeRemote(prefix: mover.keys.prefix)
        // Both devices' writes are conditional (nothing may be there); on SeaweedFS a
        // server-side copy and a PutObject at the same moment both succeeded in about 1 try
        // in 15, the last one replacing the other.
        let tries = 150
        var both = [Int]()
        for i in 0..<tries {
            let source = try put(mover, StorePath("from-\(i).txt"), "moved \(i)", meta: RemoteMeta(itemID: "moved-\(i)"))
            let target = StorePath("to-\(i).txt")
            let created = try file(Array("created \(i)".utf8))
            defer { close(created) }
            let start = DispatchSemaphore(value: 0)
            let group = DispatchGroup()
            let moved = Mutex(false), made = Mutex(false)
            DispatchQueue.global().async(group: group) {
                start.wait()
                let ok = (try? mover.move(source.path, version: source.version, to: target)) != nil
                moved.withLock { $0 = ok }
            }
            DispatchQueue.global().async(group: group) {
                start.wait()
                let ok = (try? creator.upload(from: created, to: target, expecting: .absent, meta: RemoteMeta(itemID: "made-\(i)"),
                                            limit: nil, progress: nil)) != nil
                made.withLock { $0 = ok }
            }
            start.signal()
            start.signal()
            group.wait()
            if moved.withLock({ $0 }) && made.withLock({ $0 }) { both.append(i) }
            // Whatever won, nothing is lost: the moved file is at one of its two paths.
            let there = try XCTUnwrap(try mover.item(at: target), "try \(i)")
            let stillAtSource = try mover.item(at: source.path)
            XCTAssertTrue(there.meta.itemID == "moved-\(i)" || stillAtSource?.meta.itemID == "moved-\(i)", "try \(i): the moved file is gone")
        }
        XCTAssertEqual(both, [], "both the move and the create succeeded (one replaced the other) in these tries")
    }

    func testReassignGivesAFileNewMetadataAndKeepsItsBytesAndAnotherToolsHeaders() throws {
        let r = try makeRemote()
        // another tool's object: a type and metadata of its own, then DocDrive's id on it
        let theirs = NSTemporaryDirectory() + "curl-re-\(UUID().uuidString)"
        files.append(theirs)
        try Data("<p>theirs</p>\n".utf8).write(to: URL(fileURLWithPath: theirs))
        let url = endpoint + "/" + bucket + "/" + r.keys.keyPrefix + "page.html"
        _ = try curl(["-sS", "-f", "-T", theirs, "-H", "Content-Type: text/html", "-H", "x-amz-meta-owner: web team", url])
        let before = try XCTUnwrap(try r.item(at: "page.html"))
        let after = try r.reassign("page.html", version: before.version, meta: RemoteMeta(itemID: "new-id"))
        XCTAssertEqual(after.meta.itemID, "new-id")
        XCTAssertEqual(after.version, before.version, "same bytes written in one piece, same ETag")
        XCTAssertEqual(try get(r, "page.html").1, Array("<p>theirs</p>\n".utf8))
        let headers = try curl(["-sS", "-f", "-I", url]).lowercased()
        XCTAssertTrue(headers.contains("x-amz-meta-owner: web team"), headers)
        XCTAssertTrue(headers.contains("content-type: text/html"), headers)
        XCTAssertTrue(headers.contains("x-amz-meta-docdrive-id: new-id"), headers)
        // a version that is not the object's any more is refused
        _ = try put(r, "page.html", "<p>saved since</p>\n", expecting: .version(after.version), meta: RemoteMeta(itemID: "new-id"))
        XCTAssertThrowsError(try r.reassign("page.html", version: after.version, meta: RemoteMeta(itemID: "other"))) { e in
            XCTAssertEqual((e as? RemoteError)?.code, .changed, "\(e)")
        }
        XCTAssertEqual(try get(r, "page.html").1, Array("<p>saved since</p>\n".utf8))
    }

    func testReassignNeverBringsBackBytesASaveOfTheSameMomentReplaced() throws {
        let healer = try makeRemote()
        let saver = try makeRemote(prefix: healer.keys.prefix)
        // The heal of a duplicate item id (a copy onto itself with new metadata) and another
        // device's save of the same file race: if the save succeeds, its bytes must stay.
        let tries = 150
        var lost = [Int]()
        for i in 0..<tries {
            let path = StorePath("f-\(i).txt")
            let old = try put(healer, path, "old \(i)", meta: RemoteMeta(itemID: "dup-\(i)"))
            let saved = try file(Array("saved \(i), longer".utf8))
            defer { close(saved) }
            let start = DispatchSemaphore(value: 0)
            let group = DispatchGroup()
            let didSave = Mutex(false)
            DispatchQueue.global().async(group: group) {
                start.wait()
                _ = try? healer.reassign(path, version: old.version, meta: RemoteMeta(itemID: "own-\(i)"))
            }
            DispatchQueue.global().async(group: group) {
                start.wait()
                let ok = (try? saver.upload(from: saved, to: path, expecting: .version(old.version), meta: RemoteMeta(itemID: "dup-\(i)"),
                                            limit: nil, progress: nil)) != nil
                didSave.withLock { $0 = ok }
            }
            start.signal()
            start.signal()
            group.wait()
            if didSave.withLock({ $0 }), try get(healer, path).1 != Array("saved \(i), longer".utf8) { lost.append(i) }
        }
        XCTAssertEqual(lost, [], "a save succeeded and its bytes were replaced by the old ones in these tries")
    }

    // MARK: Listing

    func testAListingPagesThroughEveryKey() throws {
        let r = try makeRemote(pageSize: 7)
        let paths = (0..<40).map { StorePath("dir\($0 % 3)/file-\($0)") }
        let errors = Locked<[String]>([])
        let dir = NSTemporaryDirectory()
        DispatchQueue.concurrentPerform(iterations: paths.count) { i in
            let p = dir + "s3page-\(UUID().uuidString)"
            FileManager.default.createFile(atPath: p, contents: Data("content \(i)".utf8))
            let fd = open(p, O_RDONLY)
            defer { close(fd); unlink(p) }
            do {
                _ = try r.upload(from: fd, to: paths[i], expecting: .absent, meta: RemoteMeta(itemID: "id\(i)"), limit: nil, progress: nil)
            } catch {
                errors.update { $0.append("\(error)") }
            }
        }
        XCTAssertEqual(errors.value, [])
        // A fresh remote (nothing cached) lists them over 6 pages and HEADs each for its metadata.
        let fresh = try makeRemote(prefix: r.keys.prefix, pageSize: 7)
        let items = try fresh.list()
        XCTAssertEqual(items.filter { $0.kind == .file }.count, 40)
        XCTAssertEqual(Set(items.filter { $0.kind == .folder }.map(\.path)), ["dir0", "dir1", "dir2"])
        XCTAssertEqual(Set(items.compactMap(\.meta.itemID)), Set((0..<40).map { "id\($0)" }))
        let cheap = try fresh.list(metadata: false)
        XCTAssertEqual(cheap.map(\.version), items.map(\.version))
    }

    func testAQuickListingGivesEveryItemWithoutAHeadAndCompletesLikeAListing() throws {
        // Given a folder marker and files another device wrote, with their metadata,
        let writer = try makeRemote(pageSize: 4)
        _ = try writer.makeFolder("Docs", meta: RemoteMeta(itemID: "folder-id", mode: 0o750))
        for i in 0..<9 {
            _ = try put(writer, StorePath("Docs/f\(i).txt"), "content \(i)",
                        meta: RemoteMeta(itemID: "id\(i)", mtimeNanoseconds: 1_700_000_000_123_456_789 + Int64(i), mode: 0o640))
        }
        let full = try makeRemote(prefix: writer.keys.prefix, pageSize: 4).list()
        // a device that never read them lists every item with no HEAD,
        let r = try makeRemote(prefix: writer.keys.prefix, pageSize: 4)
        let quick = try r.listQuickly()
        XCTAssertEqual(r.headsSent, 0)
        XCTAssertEqual(quick.items.map(\.path), full.map(\.path))
        XCTAssertEqual(quick.items.map(\.version), full.map(\.version))
        XCTAssertEqual(quick.items.map(\.size), full.map(\.size))
        XCTAssertEqual(quick.pending, Set(["Docs"] + (0..<9).map { StorePath("Docs/f\($0).txt") }))
        // each file with no id yet and the second the server wrote it as its time,
        let f0 = try XCTUnwrap(quick.items.first { $0.path == "Docs/f0.txt" })
        XCTAssertNil(f0.meta.itemID)
        let written = try XCTUnwrap(f0.meta.mtimeNanoseconds)
        XCTAssertEqual(written % 1_000_000_000, 0)
        XCTAssertLessThan(abs(Double(written) / 1e9 - Date().timeIntervalSince1970), 600)
        // and completing it HEADs each pending item once and gives what a listing gives.
        XCTAssertEqual(try r.complete(quick), full)
        XCTAssertEqual(r.headsSent, 10)
        XCTAssertEqual(full.first { $0.path == "Docs/f3.txt" }?.meta.mtimeNanoseconds, 1_700_000_000_123_456_792)
        // A second quick listing knows them all.
        XCTAssertEqual(try r.listQuickly().pending, [])
    }

    func testTheHeadAnswersKeptAcrossARestartSpareEveryHeadButThoseOfWhatChanged() throws {
        // Given a store of 12 files another device wrote (one of them a link) and a folder
        // marker, listed by a device that keeps its answers in a file,
        let writer = try makeRemote(pageSize: 5)
        _ = try writer.makeFolder("Docs", meta: RemoteMeta(itemID: "folder-id", mode: 0o750))
        for i in 0..<11 {
            _ = try put(writer, StorePath("Docs/f\(i).txt"), "content \(i)",
                        meta: RemoteMeta(itemID: "id\(i)", deviceID: "dev-w", deviceName: "Wörk", mtimeNanoseconds: 1_700_000_000_000_000_000 + Int64(i),
                                         mode: 0o640, origin: "o\(i)", parent: RemoteMeta.created))
        }
        _ = try writer.makeSymlink(Array("f0.txt".utf8), at: "Docs/link", expecting: .absent, meta: RemoteMeta(itemID: "lid"))
        let file = NSTemporaryDirectory() + "s3-answers-\(UUID().uuidString)"
        files += [file, file + ".new"]
        func device() throws -> S3Remote {
            let r = try makeRemote(prefix: writer.keys.prefix, pageSize: 5)
            return S3Remote(client: r.client, device: "testdevice", pageSize: 5, answersFile: file)
        }
        let first = try device()
        XCTAssertNil(try first.loadKeptAnswers(), "no file yet")
        let listed = try first.list()
        XCTAssertEqual(first.headsSent, 13)
        first.finishCleanup()  // the stop
        // a restarted device takes them: its listing sends no HEAD and gives the same items,
        let second = try device()
        XCTAssertEqual(try second.loadKeptAnswers(), 13)
        XCTAssertEqual(try second.list(), listed)
        XCTAssertEqual(second.headsSent, 0)
        XCTAssertEqual(listed.first { $0.path == "Docs/link" }?.kind, .symlink)
        // and after one file changed meanwhile, only that one is looked up again.
        _ = try put(writer, "Docs/f3.txt", "changed", expecting: .version(listed.first { $0.path == "Docs/f3.txt" }!.version),
                    meta: RemoteMeta(itemID: "id3"))
        let third = try device()
        XCTAssertEqual(try third.loadKeptAnswers(), 13)
        let again = try third.list()
        XCTAssertEqual(third.headsSent, 1)
        XCTAssertEqual(again.first { $0.path == "Docs/f3.txt" }?.size, 7)
        // Another remote's file is of no use (another prefix: nothing taken), and a file cut
        // short, damaged or of something else is refused with a sentence, nothing taken.
        let other = S3Remote(client: try makeRemote().client, device: "testdevice", answersFile: file)
        XCTAssertEqual(try other.loadKeptAnswers(), 0)
        let whole = try Data(contentsOf: URL(fileURLWithPath: file))
        // (the first record's key length: after the magic, the identity and the record's tag)
        let firstKey = 12 + 4 + [endpoint, bucket, writer.keys.prefix].joined(separator: "\n").utf8.count + 1
        let lengthPastTheEnd: Data = whole.prefix(firstKey) + Data([0xFF, 0xFF, 0x00, 0x00]) + whole.dropFirst(firstKey + 4)
        var keyChanged = whole
        keyChanged[keyChanged.startIndex + firstKey + 6] ^= 0x01  // (a byte of the prefix: a flip, never the same byte)
        let damaged: [(String, Data)] = [("cut", whole.prefix(whole.count - 3)), ("cut in a record", whole.prefix(whole.count / 2)),
                                         ("longer", whole + Data([1])), ("not ours", Data("hello".utf8)),
                                         ("a length past the end", lengthPastTheEnd), ("a byte of a key changed", keyChanged)]
        for (what, bytes) in damaged {
            try bytes.write(to: URL(fileURLWithPath: file))
            let d = try device()
            XCTAssertThrowsError(try d.loadKeptAnswers(), what) { e in
                XCTAssertTrue((e as? RemoteError)?.message.contains(file) == true, "\(what): \(e)")
            }
            _ = try d.listQuickly()
            XCTAssertEqual(d.headsSent, 0)
            XCTAssertEqual(try d.listQuickly().pending.count, 13, what)
        }
    }

    func testPicturesTravelBesideTheDocumentsAndAreBounded() throws {
        let r = try makeRemote()
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 7, count: 100)
        XCTAssertNil(try r.picture(item: "item-1"))
        try r.putPicture(item: "item-1", png)
        XCTAssertEqual(try r.picture(item: "item-1"), png)
        // Not a document of the store,
        XCTAssertEqual(try r.list().map(\.path), [])
        // an object larger than a picture is not read to its end, and something else than a
        // PNG is no picture,
        try r.putPicture(item: "item-2", png + Array(repeating: 1, count: RemotePictures.maxBytes))
        XCTAssertNil(try r.picture(item: "item-2"))
        try r.putPicture(item: "item-3", Array("not a png".utf8))
        XCTAssertNil(try r.picture(item: "item-3"))
        // and an id that is not letters, digits, - and _ names none.
        for bad in ["../item-1", "a/b", "", String(repeating: "x", count: 65)] {
            assertCode(.invalidName) { _ = try r.picture(item: bad) }
        }
        let folder = NSTemporaryDirectory() + "pictures-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let f = FolderRemote(root: folder)
        try f.writeMarker(store: "t")
        try f.putPicture(item: "item-1", png)
        XCTAssertEqual(try f.picture(item: "item-1"), png)
        XCTAssertEqual(try f.list().map(\.path), [])
        assertCode(.invalidName) { try f.putPicture(item: "../../escape", png) }
    }

    func testAListingAfterThisDevicesOwnWritesSendsNoHead() throws {
        // Given 30 files this remote wrote (a bulk copy's uploads),
        let r = try makeRemote()
        var written = [StorePath: String]()
        for i in 0..<30 { written[StorePath("dir/f\(i).txt")] = try put(r, StorePath("dir/f\(i).txt"), "content \(i)", meta: RemoteMeta(itemID: "id\(i)")).version }
        // its next listing knows them without a HEAD each (the answers to its writes told),
        let before = r.headsSent
        let items = try r.list()
        XCTAssertEqual(r.headsSent - before, 0, "HEADs sent for objects this device just wrote")
        XCTAssertEqual(Dictionary(uniqueKeysWithValues: items.filter { $0.kind == .file }.map { ($0.path, $0.version) }), written)
        XCTAssertEqual(Set(items.compactMap(\.meta.itemID)), Set((0..<30).map { "id\($0)" }))
        // while a file another tool then overwrote with the same bytes and no metadata is
        // looked up (written a second later: not the object this device wrote),
        sleep(2)
        let url = endpoint + "/" + bucket + "/" + r.keys.keyPrefix + "dir/f0.txt"
        let theirs = NSTemporaryDirectory() + "curl-same-\(UUID().uuidString)"
        files.append(theirs)
        try Data("content 0".utf8).write(to: URL(fileURLWithPath: theirs))
        _ = try curl(["-sS", "-f", "-T", theirs, url])
        let again = try r.list()
        XCTAssertEqual(r.headsSent - before, 1)
        let f0 = try XCTUnwrap(again.first { $0.path == "dir/f0.txt" })
        XCTAssertEqual(f0.version, written["dir/f0.txt"], "same bytes, same ETag")
        XCTAssertNil(f0.meta.itemID, "the metadata of the object curl wrote, not this device's")
        // and a remote that wrote nothing HEADs each file once.
        let fresh = try makeRemote(prefix: r.keys.prefix)
        _ = try fresh.list()
        XCTAssertEqual(fresh.headsSent, 30)
    }

    func testANameThatIsNotUTF8RoundTrips() throws {
        let r = try makeRemote()
        let name = StorePath(bytes: Array("Caf".utf8) + [0xE9, 0xFF] + Array(" 100% ~dd~.txt".utf8))
        let dir = StorePath(bytes: Array("d\u{01}".utf8))
        let path = dir.appending(name.bytes)
        _ = try put(r, path, "latin-1")
        XCTAssertEqual(try r.objectKeys(), [r.keys.keyPrefix + "~dd~d%01/~dd~Caf%E9%FF 100%25 ~dd~.txt"])
        let fresh = try makeRemote(prefix: r.keys.prefix)
        XCTAssertEqual(try fresh.list().map(\.path), [dir, path])
        XCTAssertEqual(try fresh.get(path).1, Array("latin-1".utf8))
    }

    // MARK: Large files

    func testAMultipartUploadStreamsWithFlatMemory() throws {
        // Given a 160 MiB file and 5 MiB parts, 4 at once,
        let size = 160 << 20
        let path = NSTemporaryDirectory() + "s3big-\(UUID().uuidString)"
        files.append(path)
        let out = open(path, O_RDWR | O_CREAT, 0o600)
        var block = [UInt8](repeating: 0, count: 1 << 20)
        var hasher = SHA256()
        for i in 0..<(size >> 20) {
            for j in stride(from: 0, to: block.count, by: 8) { block[j] = UInt8(truncatingIfNeeded: i &* 31 &+ j >> 3) }
            hasher.update(data: block)
            XCTAssertEqual(write(out, block, block.count), block.count)
        }
        close(out)
        let expected = hasher.finalize().map { String(format: "%02x", $0) }.joined()
        let r = try makeRemote(partSize: 5 << 20, parallel: 4)
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        // when it is uploaded,
        let before = Self.rss()
        Self.resetPeak()
        let start = Date()
        var seen: Int64 = 0
        let item = try r.upload(from: fd, to: "big.bin", expecting: .absent, meta: RemoteMeta(itemID: "big"), limit: nil) { done, total in
            XCTAssertEqual(total, Int64(size))
            seen = max(seen, done)
        }
        let upSeconds = Date().timeIntervalSince(start)
        let peak = Self.peak()
        // then memory stayed flat (far below the file), the object is one multipart object with the bytes,
        XCTAssertEqual(seen, Int64(size))
        XCTAssertTrue(item.version.hasSuffix("-32"), "a 32-part upload's ETag: \(item.version)")
        XCTAssertLessThan(peak - before, 96 << 20, "memory grew by \((peak - before) >> 20) MiB for a \(size >> 20) MiB upload")
        XCTAssertEqual(try r.uploadsInProgress().count, 0)
        XCTAssertEqual(try r.objectKeys(), [r.keys.keyPrefix + "big.bin"], "no upload record is left")
        let copy = NSTemporaryDirectory() + "s3bigcopy-\(UUID().uuidString)"
        files.append(copy)
        let cfd = open(copy, O_RDWR | O_CREAT, 0o600)
        defer { close(cfd) }
        Self.resetPeak()
        let start2 = Date()
        let got = try r.download("big.bin", version: item.version, to: cfd, progress: nil)
        let downSeconds = Date().timeIntervalSince(start2)
        let downPeak = Self.peak()
        XCTAssertEqual(got.size, Int64(size))
        XCTAssertEqual(got.meta.itemID, "big")
        XCTAssertEqual(try Self.sha256(of: copy), expected)
        XCTAssertLessThan(downPeak - before, 96 << 20, "memory grew by \((downPeak - before) >> 20) MiB for a download")
        print(String(format: "S3 figures: upload %.1f MB/s (peak RSS +%d MiB), download %.1f MB/s (peak RSS +%d MiB) of %d MiB",
                     Double(size) / upSeconds / 1e6, (peak - before) >> 20, Double(size) / downSeconds / 1e6, (downPeak - before) >> 20, size >> 20))
    }

    /// Chunks of an answer are taken without a promise while few are queued (S3HTTP), so a
    /// local write that fails cancels the request instead: the download must fail with the
    /// write's sentence, and the client must stay usable after the cancelled answer.
    func testADownloadWhoseLocalWriteFailsStopsAndTheNextOneWorks() throws {
        let r = try makeRemote()
        let size = 8 << 20
        let fd = try file((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        _ = try r.upload(from: fd, to: "w.bin", expecting: .absent, meta: RemoteMeta(), limit: nil, progress: nil)
        close(fd)
        // Given a descriptor that cannot be written (opened for reading only),
        let p = NSTemporaryDirectory() + "s3ro-\(UUID().uuidString)"
        files.append(p)
        FileManager.default.createFile(atPath: p, contents: Data())
        let ro = open(p, O_RDONLY)
        defer { close(ro) }
        // when the download writes to it, it fails with the write's reason,
        let start = Date()
        var seen: Int64 = 0
        XCTAssertThrowsError(try r.download("w.bin", version: nil, to: ro) { done, _ in seen = done }) { e in
            XCTAssertEqual((e as? RemoteError)?.code, .io, "\(e)")
            XCTAssertTrue("\(e)".contains("Cannot write the downloaded file"), "\(e)")
        }
        XCTAssertEqual(seen, 0, "no byte was written")
        XCTAssertLessThan(Date().timeIntervalSince(start), 10)
        // and the next download over the same client gets every byte.
        let (item, bytes) = try get(r, "w.bin")
        XCTAssertEqual(item.size, Int64(size))
        XCTAssertEqual(bytes.count, size)
        XCTAssertEqual(bytes.prefix(4096), (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 7) }[...])
    }

    func testUnfinishedUploadsOfThisDeviceAreAborted() throws {
        let r = try makeRemote()
        let id = try r.beginUnfinishedUpload(at: "crashed.bin")
        XCTAssertEqual(try r.uploadsInProgress().map(\.uploadID), [id])
        // Another device's record is not ours to abort.
        let other = S3Remote(client: r.client, device: "otherdevice")
        let theirs = try other.beginUnfinishedUpload(at: "theirs.bin")
        XCTAssertEqual(r.removeStaleUploads(), 1)
        XCTAssertEqual(try r.uploadsInProgress().map(\.uploadID), [theirs])
        XCTAssertEqual(other.removeStaleUploads(), 1)
        XCTAssertEqual(try r.uploadsInProgress().count, 0)
        XCTAssertEqual(try r.objectKeys(), [])
    }

    // MARK: Errors

    func testAWrongSecretKeyIsOneSentence() throws {
        let wrong = "not-the-secret-\(UUID().uuidString)"
        let r = try makeRemote(secret: wrong)
        XCTAssertThrowsError(try r.checkBucket()) { e in
            let text = "\(e)"
            XCTAssertEqual((e as? RemoteError)?.code, .unreachable)
            XCTAssertTrue(text.contains("refused the secret key"), text)
            XCTAssertFalse(text.contains(wrong), "the secret is in the sentence")
            XCTAssertFalse(text.contains(Self.env["AWS_ACCESS_KEY_ID"] ?? "-"), "the key id is in the sentence")
            XCTAssertEqual(text.filter { $0 == "." }.count >= 1, true)
        }
    }

    func testCredentialsRenewedInTheCredentialsFileAreTakenWithoutARestart() throws {
        // Given a store whose credentials file holds keys the server refuses (expired ones)
        let path = NSTemporaryDirectory() + "s3-credentials-\(UUID().uuidString)"
        files.append(path)
        func writeCredentials(secret: String) throws {
            let text = "[default]\naws_access_key_id = \(Self.env["AWS_ACCESS_KEY_ID"] ?? "")\naws_secret_access_key = \(secret)\n"
            FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
        }
        try writeCredentials(secret: "an-expired-secret")
        let settings = S3Settings(endpoint: endpoint, bucket: bucket, prefix: "t-\(UUID().uuidString.prefix(8))", pathStyle: true,
                                  credentialsFile: path)
        let r = try S3Remote(settings: settings, device: "testdevice")
        XCTAssertThrowsError(try r.checkBucket()) { e in XCTAssertTrue("\(e)".contains("refused the secret key"), "\(e)") }
        // When fresh ones are written there (as `aws sso login` or a credential helper does)
        try writeCredentials(secret: Self.env["AWS_SECRET_ACCESS_KEY"] ?? "")
        // Then the same remote works again: the refused request was signed again with them
        XCTAssertNoThrow(try r.checkBucket())
        XCTAssertNoThrow(try put(r, "renewed.txt", "after the renewal"))
    }

    func testAClockTooFarOffIsOneSentence() throws {
        var client = try makeRemote().client
        client.now = { Date().addingTimeInterval(3 * 3600) }
        let r = S3Remote(client: client, device: "d")
        XCTAssertThrowsError(try r.checkBucket()) { e in
            XCTAssertEqual((e as? RemoteError)?.code, .unreachable)
            XCTAssertTrue("\(e)".contains("clock is too far from the S3 server's"), "\(e)")
        }
    }

    func testAMissingBucketAndAnUnreachableEndpointAreOneSentenceEach() throws {
        let c = SigV4.Credentials(accessKeyID: Self.env["AWS_ACCESS_KEY_ID"] ?? "", secretAccessKey: Self.env["AWS_SECRET_ACCESS_KEY"] ?? "")
        let missing = S3Remote(client: try S3Client(settings: S3Settings(endpoint: endpoint, bucket: "no-such-bucket-\(UUID().uuidString.prefix(8).lowercased())", pathStyle: true), credentials: c), device: "d")
        XCTAssertThrowsError(try missing.checkReachable()) { e in
            XCTAssertTrue("\(e)".contains("does not exist"), "\(e)")
        }
        // A port nothing listens on.
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: 0, sin_addr: in_addr(s_addr: UInt32(0x7F000001).bigEndian), sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &len) } }
        let port = Int(UInt16(bigEndian: addr.sin_port))
        close(s)
        let down = S3Remote(client: try S3Client(settings: S3Settings(endpoint: "http://127.0.0.1:\(port)", bucket: bucket, pathStyle: true), credentials: c,
                                                 retry: S3RetryPolicy(attempts: 3, baseDelay: 0.01, maxDelay: 0.05)), device: "d")
        XCTAssertThrowsError(try down.list()) { e in
            XCTAssertEqual((e as? RemoteError)?.code, .unreachable)
            XCTAssertTrue("\(e)".contains("cannot be reached"), "\(e)")
            XCTAssertTrue("\(e)".contains("3 attempts"), "\(e)")
        }
    }

    // MARK: Faults

    func testEveryStepGoesThroughAServerAnswering500And503() throws {
        // Given a front of the server that fails three requests in four (503 SlowDown, 500
        // after the write happened, 500 before it),
        guard let faulty = Self.env["DOCDRIVE_S3_FAULTY_ENDPOINT"] else { return XCTFail("weed.py sets DOCDRIVE_S3_FAULTY_ENDPOINT") }
        let saved = endpoint
        endpoint = faulty
        defer { endpoint = saved }
        let before = try faults(faulty)
        let r = try makeRemote(partSize: 5 << 20, parallel: 2, pageSize: 2, attempts: 8)
        // when every kind of step is taken through it,
        var big = [UInt8](repeating: 0, count: 12 << 20)
        for i in stride(from: 0, to: big.count, by: 4096) { big[i] = UInt8(truncatingIfNeeded: i >> 12) }
        let fd = try file(big)
        defer { close(fd) }
        let b = try r.upload(from: fd, to: "big.bin", expecting: .absent, meta: RemoteMeta(itemID: "b"), limit: nil, progress: nil)
        let s = try put(r, "small.txt", "small")
        let s2 = try put(r, "small.txt", "small 2", expecting: .version(s.version))
        _ = try r.makeFolder("F", meta: RemoteMeta())
        _ = try r.makeSymlink(Array("t".utf8), at: "F/link", expecting: .absent, meta: RemoteMeta())
        let moved = try r.move("small.txt", version: s2.version, to: "F/moved.txt")
        // then nothing is lost and nothing is doubled.
        let fresh = try makeRemote(prefix: r.keys.prefix, pageSize: 2, attempts: 8)
        XCTAssertEqual(try fresh.list().map(\.path), ["F", "F/link", "F/moved.txt", "big.bin"])
        // (twice: one of them meets a download cut in the middle, and resumes with a Range)
        let cuts = try faults(faulty, "/__cuts")
        XCTAssertEqual(try fresh.get("big.bin").1, big)
        XCTAssertEqual(try fresh.get("big.bin").1, big)
        XCTAssertGreaterThan(try faults(faulty, "/__cuts"), cuts, "no download was cut")
        XCTAssertEqual(try fresh.get("F/moved.txt").1, Array("small 2".utf8))
        try r.delete("F/moved.txt", version: moved.version)
        try r.delete("big.bin", version: b.version)
        XCTAssertEqual(try fresh.list().map(\.path), ["F", "F/link"])
        XCTAssertEqual(try r.uploadsInProgress().count, 0)
        XCTAssertGreaterThan(try faults(faulty) - before, 20, "the front injected faults")
    }

    func faults(_ endpoint: String, _ counter: String = "/__faults") throws -> Int {
        Int(try curl(["-sS", "-f", endpoint + counter])) ?? -1
    }

    // MARK: Interoperability

    func testCurlReadsExactlyTheBytesAndTheMetadata() throws {
        let r = try makeRemote()
        var bytes = [UInt8]()
        for i in 0..<300_000 { bytes.append(UInt8(truncatingIfNeeded: i * 7 + i / 251)) }
        let fd = try file(bytes)
        defer { close(fd) }
        _ = try r.upload(from: fd, to: "Reports/q3 final.odt", expecting: .absent,
                         meta: RemoteMeta(itemID: "item-q3", deviceID: "dev1", deviceName: "Zoë", mtimeNanoseconds: 1_700_000_000_000_000_000, mode: 0o600),
                         limit: nil, progress: nil)
        let url = endpoint + "/" + bucket + "/" + SigV4.encode(try r.keys.key("Reports/q3 final.odt"), slash: false)
        let out = NSTemporaryDirectory() + "curl-\(UUID().uuidString)"
        files.append(out)
        let headers = try curl(["-sS", "-f", "-D", "-", "-o", out, url])
        XCTAssertEqual(Array(FileManager.default.contents(atPath: out) ?? Data()), bytes)
        let lower = headers.lowercased()
        XCTAssertTrue(lower.contains("x-amz-meta-docdrive-id: item-q3"), headers)
        XCTAssertTrue(lower.contains("x-amz-meta-docdrive-device-name: zo%c3%ab"), headers)
        XCTAssertTrue(lower.contains("x-amz-meta-docdrive-mode: 600"), headers)
        // And what curl puts there, DocDrive reads.
        let theirs = NSTemporaryDirectory() + "curl-up-\(UUID().uuidString)"
        files.append(theirs)
        try Data("written by curl\n".utf8).write(to: URL(fileURLWithPath: theirs))
        _ = try curl(["-sS", "-f", "-T", theirs, endpoint + "/" + bucket + "/" + r.keys.keyPrefix + "from-curl.txt"])
        let items = try r.list()
        let first = try XCTUnwrap(items.first { $0.path == "from-curl.txt" && $0.kind == .file })
        XCTAssertEqual(try get(r, "from-curl.txt").1, Array("written by curl\n".utf8))
        // Overwritten by curl: a new version at the next listing; deleted by curl: gone.
        try Data("overwritten by curl, longer\n".utf8).write(to: URL(fileURLWithPath: theirs))
        _ = try curl(["-sS", "-f", "-T", theirs, endpoint + "/" + bucket + "/" + r.keys.keyPrefix + "from-curl.txt"])
        let second = try XCTUnwrap(try r.list().first { $0.path == "from-curl.txt" })
        XCTAssertNotEqual(second.version, first.version)
        XCTAssertEqual(second.size, Int64("overwritten by curl, longer\n".utf8.count))
        _ = try curl(["-sS", "-f", "-X", "DELETE", endpoint + "/" + bucket + "/" + r.keys.keyPrefix + "from-curl.txt"])
        XCTAssertFalse(try r.list().contains { $0.path == "from-curl.txt" })
    }

    /// Runs curl, which signs with the test credentials; returns its output.
    func curl(_ args: [String]) throws -> String { try Self.curl(args) }

    /// Runs curl, which signs with the test credentials; returns its output (another S3 client
    /// than DocDrive's, for what no device of the tests would write).
    static func curl(_ args: [String]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        let id = Self.env["AWS_ACCESS_KEY_ID"] ?? "", secret = Self.env["AWS_SECRET_ACCESS_KEY"] ?? ""
        p.arguments = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "\(id):\(secret)"] + args
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, "curl \(args)")
        return String(decoding: data, as: UTF8.self)
    }

    // MARK: Measuring

    static func rss() -> Int { status("VmRSS") }
    static func peak() -> Int { status("VmHWM") }
    static func resetPeak() { try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8) }
    static func status(_ field: String) -> Int {
        let text = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            return (Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0) * 1024
        }
        return 0
    }

    static func sha256(of path: String) throws -> String {
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        var h = SHA256()
        var buf = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = read(fd, &buf, buf.count)
            if n <= 0 { break }
            h.update(data: buf[0..<n])
        }
        return h.finalize().map { String(format: "%02x", $0) }.joined()
    }
}

extension S3Remote {
    fileprivate func get(_ path: StorePath) throws -> (RemoteItem, [UInt8]) {
        let p = NSTemporaryDirectory() + "s3get-\(UUID().uuidString)"
        defer { unlink(p) }
        let fd = open(p, O_RDWR | O_CREAT, 0o600)
        defer { close(fd) }
        let item = try download(path, version: nil, to: fd, progress: nil)
        return (item, Array(FileManager.default.contents(atPath: p) ?? Data()))
    }
}

/// A value the test's threads share.
final class Locked<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var v: T
    init(_ v: T) { self.v = v }
    var value: T { lock.withLock { v } }
    func update(_ body: (inout T) -> Void) { lock.withLock { body(&v) } }
}
