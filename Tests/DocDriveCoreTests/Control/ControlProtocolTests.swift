// ControlProtocolTests: the control socket's typed messages: every request and answer survives
// the wire with the keys the commands and the daemon have always used; another version, an
// unknown command and any bytes at all get one sentence, from the decoder and from a real server.
import DocDriveCore
import Foundation
import Logging
import XCTest

final class ControlProtocolTests: XCTestCase {
    /// Every request, with each optional field both set and left out.
    static let requests: [ControlRequest] = [
        .open(.init(app: "org.example.notes", path: "Work/a b.odt", name: "Mine.odt", into: "Sub/Dir", noRename: true)),
        .open(.init(app: "org.example.notes", path: "Work/a.odt")),
        .importDocument(.init(app: "org.example.notes", path: "Work/\"quoted\"\\.txt")),
        .move(.init(app: "org.example.notes", path: "Notes/d.odt", to: "Work/2026", noRename: false)),
        .export(.init(app: "org.example.notes", path: "Notes/d.odt", to: "Work", noRename: true)),
        .bookmarkCreate(.init(app: "org.example.notes", path: "Notes/é/ü.txt")),
        .bookmarkResolve(.init(app: "org.example.notes", token: "eyJhIjoxfQ.c2ln")),
        .grantsList(.init(app: "org.example.notes")),
        .grantsList(.init()),
        .grantsRevoke(.init(app: "org.example.notes", path: "Work/a.odt")),
        .appClose(.init(app: "org.example.notes")),
        .status(.init()),
        .statusWatch(.init()),
        .syncPoll(.init(timeout: 12.5)),
        .syncPoll(.init()),
        .query(.init(expr: ["kind:image", "size>1M", "-draft"], scopes: ["documents", "folder:Work/x"], sort: .size,
                     descending: false, limit: 10, count: true, pathsOnly: true, raw: true)),
        .query(.init(expr: [])),
        .queryWatch(.init(expr: ["zebra"], scopes: ["Work"], sort: .name, descending: true)),
        .pin(.init(path: "Work/Reports", on: true)),
        .pin(.init(path: "Work/Reports", on: false)),
        .fill(.init(path: "Work/Reports/q3.odt")),
        .evict(.init(path: "Work")),
    ]

    /// The keys each command has always sent (the version is new): what old scripts and the
    /// query fast path write.
    static let keys: [String: Set<String>] = [
        "open": ["app", "path", "as", "into", "noRename"],
        "import": ["app", "path"],
        "move": ["app", "path", "to", "noRename"],
        "export": ["app", "path", "to", "noRename"],
        "bookmark-create": ["app", "path"],
        "bookmark-resolve": ["app", "token"],
        "grants-list": ["app"],
        "grants-revoke": ["app", "path"],
        "app-close": ["app"],
        "status": [],
        "status-watch": [],
        "sync-poll": ["timeout"],
        "query": ["expr", "in", "sort", "descending", "limit", "count", "pathsOnly", "raw"],
        "query-watch": ["expr", "in", "sort", "descending", "limit", "count", "pathsOnly", "raw"],
        "pin": ["path", "on"],
        "fill": ["path"],
        "evict": ["path"],
    ]

    static func object(_ data: Data) throws -> [String: Any] {
        try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// The error `body` throws (nil when it throws none).
    static func error<T>(_ body: () throws(DriveError) -> T) -> DriveError? {
        do throws(DriveError) {
            _ = try body()
            return nil
        } catch {
            return error
        }
    }

    func testEveryRequestRoundTripsWithItsCommandsKeysAndTheVersion() throws {
        for request in Self.requests {
            let line = request.line()
            XCTAssertEqual(line.last, 0x0A, "one line")
            XCTAssertFalse(line.dropLast().contains(0x0A), "one line")
            let object = try Self.object(line)
            XCTAssertEqual(object["version"] as? Int, ControlProtocol.version)
            let command = try XCTUnwrap(object["command"] as? String)
            XCTAssertEqual(command, request.command)
            let allowed = try XCTUnwrap(Self.keys[command], "\(command) is not a command of today")
            XCTAssertTrue(Set(object.keys).subtracting(["version", "command"]).isSubset(of: allowed), "\(object.keys)")
            XCTAssertEqual(try ControlRequest.decode(line.dropLast()), request)
        }
        // Every command is among them.
        XCTAssertEqual(Set(Self.requests.map(\.command)), Set(Self.keys.keys))
    }

    func testEveryFieldIsOnTheWire() throws {
        // The fullest request of each kind carries every key its command has.
        let open = try Self.object(Self.requests[0].line())
        XCTAssertEqual(Set(open.keys), Self.keys["open"]!.union(["version", "command"]))
        XCTAssertEqual(open["as"] as? String, "Mine.odt")
        let query = try Self.object(Self.requests.first { $0.command == "query" }!.line())
        XCTAssertEqual(Set(query.keys), Self.keys["query"]!.union(["version", "command"]))
        XCTAssertEqual(query["in"] as? [String], ["documents", "folder:Work/x"])
        XCTAssertEqual(query["sort"] as? String, "size")
    }

    /// Encodes `answer` as the daemon does, checks the envelope and the result's keys, decodes it
    /// as the command does.
    func roundTrip<A: Codable & Sendable & Equatable>(_ answer: A, keys: Set<String>, file: StaticString = #filePath, line: UInt = #line) throws {
        let data = ControlAnswer.ok(answer).line()
        let object = try Self.object(data)
        XCTAssertEqual(object["version"] as? Int, ControlProtocol.version, file: file, line: line)
        XCTAssertEqual(object["ok"] as? Bool, true, file: file, line: line)
        XCTAssertEqual(Set(try XCTUnwrap(object["result"] as? [String: Any]).keys), keys, file: file, line: line)
        XCTAssertEqual(try ControlAnswer<A>.decode(data).get(), answer, file: file, line: line)
    }

    func testEveryAnswerRoundTripsWithTheKeysTheCommandsPrint() throws {
        try roundTrip(ReferenceAnswer(reference: "Notes/a.odt", target: "Work/a.odt", item: "i1", app: "x"),
                      keys: ["reference", "target", "item", "app"])
        try roundTrip(CopyAnswer(copy: "Notes/Inbox/a.odt", source: "Work/a.odt", app: "x"), keys: ["copy", "source", "app"])
        try roundTrip(PinAnswer(files: 3, toFill: [FileSize(path: "Work/a.odt", size: 12)]), keys: ["files", "toFill"])
        try roundTrip(FillAnswer(path: "Work/a.odt", size: 12), keys: ["path", "size"])
        try roundTrip(EvictAnswer(files: 2, evicted: 1, freed: 4096, refused: ["x is open"]), keys: ["files", "evicted", "freed", "refused"])
        try roundTrip(BookmarkAnswer(token: "t.s", path: "Work/a.odt", item: "i1", app: "x"), keys: ["token", "path", "item", "app"])
        try roundTrip(ResolvedBookmark(path: "Work/b.odt", stale: true, item: "i1", app: "x"), keys: ["path", "stale", "item", "app"])
        try roundTrip(GrantsAnswer(grants: [GrantRow(app: "x", item: "i1", granted: 1_763_000_000.25, path: "Work/a.odt", status: "ok")]),
                      keys: ["grants"])
        try roundTrip(GrantsAnswer(grants: []), keys: ["grants"])
        try roundTrip(RevokeAnswer(app: "x", revoked: "Work/a.odt", item: "i1"), keys: ["app", "revoked", "item"])
        try roundTrip(AppCloseAnswer(app: "x", removed: 3), keys: ["app", "removed"])
        let offline = RemoteState(offlineSince: 1_763_000_000, offlineReason: "The remote does not answer.", devices: ["laptop"])
        try roundTrip(SyncPollAnswer(stores: ["work": offline, "photos": RemoteState(lastPoll: 1_763_000_001.5)]), keys: ["stores"])
        try roundTrip(SyncPollAnswer(stores: ["work": RemoteState()], idle: true), keys: ["stores", "idle"])
        let item = QueryItem(path: "Work/a.png", name: "a.png", kind: "image", size: 1 << 40, modified: 1_763_000_000.125,
                             external: true, store: "work", app: "org.example.notes", event: "+")
        try roundTrip(QueryAnswer(items: [item, QueryItem(path: "Work/gone.png", event: "-")]), keys: ["items"])
        try roundTrip(QueryAnswer(paths: ["Work/a.png", "Work/b c.png"]), keys: ["paths"])
        try roundTrip(QueryAnswer(count: 7), keys: ["count"])
    }

    func testTheKeysOfAnItemAreThoseOfToday() throws {
        // An item that left a live query has only its path and event; `external` only when true.
        let gone = try Self.object(JSONEncoder().encode(QueryItem(path: "Work/x", event: "-")))
        XCTAssertEqual(Set(gone.keys), ["path", "event"])
        let found = try Self.object(JSONEncoder().encode(QueryItem(path: "Work/x", name: "x", kind: "text", size: 1, modified: 2, store: "work")))
        XCTAssertEqual(Set(found.keys), ["path", "name", "kind", "size", "modified", "store"])
        let row = try Self.object(JSONEncoder().encode(SyncPollAnswer(stores: ["w": RemoteState()])))
        XCTAssertEqual(Set(try XCTUnwrap((row["stores"] as? [String: Any])?["w"] as? [String: Any]).keys), ["devices"])
    }

    /// A store's status as a daemon answers it: every field set.
    static func busyStore() throws -> StoreStatus {
        let conflict = try JSONDecoder().decode(ConflictRecord.self, from: Data(#"""
            {"store":"work","path":"Reports/q3.odt","copy":"Reports/q3 (conflict from beta).odt","device":"beta","time":1763000000.5}
            """#.utf8))
        var remote = RemoteState(lastPoll: 1_763_000_001.25, devices: ["beta", "laptop"])
        remote.polls = 12
        remote.cacheBytes = 1 << 30
        return StoreStatus(name: "work", uploads: [.pending: 2, .uploading: 1, .synced: 40, .failed: 1], bytesLeft: 3 << 20,
                           failed: [FailedUpload(path: "big.iso", error: "The remote refused it.")], runningWorkers: 4,
                           inFlight: [InFlightUpload(store: "work", path: "movie.bin", done: 1 << 20, total: 24 << 20),
                                      InFlightUpload(store: "work", path: "Photos/é.jpg", done: 0, total: 9, direction: .down)],
                           held: true, remote: remote, conflicts: [conflict],
                           keptDeleted: KeptDeleted(folder: "/home/u/.docdrive/stores/work/deleted", files: 3, bytes: 12_288))
    }

    func testTheDriveStatusRoundTripsAsOneAnswer() throws {
        // A daemon's answer: every field set; a store's queue counts keyed by the states' names.
        let full = DriveStatus(items: 1234, uploads: [.pending: 2, .uploading: 1, .synced: 40, .failed: 1], waiting: 3,
                               stores: [try Self.busyStore(), StoreStatus(name: "photos")],
                               device: DeviceIdentity.make(name: "laptop"), indexWriteError: "database or disk is full",
                               references: [ReferenceRow(app: "x", path: "Notes/a.odt", status: "ok", item: "i1", target: "Work/a.odt"),
                                            ReferenceRow(app: "x", path: "Notes/b.odt", status: "invalid")],
                               homeDiskFree: 1 << 40)
        try roundTrip(full, keys: ["items", "uploads", "waiting", "stores", "device", "indexWriteError", "references", "homeDiskFree"])
        let result = try XCTUnwrap(Self.object(ControlAnswer.ok(full).line())["result"] as? [String: Any])
        XCTAssertEqual(result["uploads"] as? [String: Int], ["pending": 2, "uploading": 1, "synced": 40, "failed": 1])
        let stores = try XCTUnwrap(result["stores"] as? [[String: Any]])
        XCTAssertEqual(Set(stores[0].keys), ["name", "uploads", "bytesLeft", "failed", "runningWorkers", "inFlight", "held", "remote",
                                             "conflicts", "keptDeleted"])
        XCTAssertEqual((stores[0]["inFlight"] as? [[String: Any]])?.map { $0["direction"] as? String }, ["up", "down"])
        // A store the daemon does not run, and the status gathered without a daemon: what is
        // unknown is left out.
        XCTAssertEqual(Set(stores[1].keys), ["name", "uploads", "bytesLeft", "failed", "inFlight", "held", "conflicts", "keptDeleted"])
        try roundTrip(DriveStatus(), keys: ["items", "uploads", "waiting", "stores"])
        // A state this command does not know is an answer it cannot read, said in one sentence.
        let unknown = Data(#"{"version":\#(ControlProtocol.version),"ok":true,"result":{"items":0,"uploads":{"teleported":1},"waiting":0,"stores":[]}}"#.utf8)
        let e = Self.error { () throws(DriveError) in try ControlAnswer<DriveStatus>.decode(unknown).get() }
        XCTAssertEqual(e?.message, "The daemon's answer could not be read (did it stop?).")
    }

    func testTheErrorAnswerCarriesItsCodeAndSentence() throws {
        for code in [DriveError.Code.notFound, .invalidToken, .badRequest, .protocolMismatch, .notPermitted, .unreachable] {
            let data = ControlAnswer<Never>.failed(DriveError(code, "Something is wrong.")).line()
            let object = try Self.object(data)
            XCTAssertEqual(object["version"] as? Int, ControlProtocol.version)
            XCTAssertEqual(object["ok"] as? Bool, false)
            XCTAssertEqual(object["code"] as? String, code.description)
            XCTAssertEqual(object["error"] as? String, "Something is wrong.")
            // Any command reads it as its error.
            let e = Self.error { () throws(DriveError) in try ControlAnswer<ReferenceAnswer>.decode(data).get() }
            XCTAssertEqual(e?.code, code)
            XCTAssertEqual(e?.message, "Something is wrong.")
        }
    }

    func testARequestOfAnotherVersionGetsOneSentence() {
        let older = #"{"command":"app-close","app":"x"}"#  // version 1 had no version field
        let e1 = Self.error { () throws(DriveError) in try ControlRequest.decode(Data(older.utf8)) }
        XCTAssertEqual(e1?.code, .protocolMismatch)
        XCTAssertEqual(e1?.message, "This docdrive speaks control protocol 1 but the mounted daemon speaks \(ControlProtocol.version); use the docdrive that mounted the drive, or remount it with this one.")
        // A newer command, even one this daemon does not know, hears the version first.
        let newer = #"{"version":\#(ControlProtocol.version + 1),"command":"teleport","where":1}"#
        let e2 = Self.error { () throws(DriveError) in try ControlRequest.decode(Data(newer.utf8)) }
        XCTAssertEqual(e2?.code, .protocolMismatch)
        XCTAssertEqual(e2?.message, "This docdrive speaks control protocol \(ControlProtocol.version + 1) but the mounted daemon speaks \(ControlProtocol.version); remount the drive after upgrading.")
    }

    func testAnAnswerOfAnotherVersionGetsOneSentence() {
        // What a daemon of version 1 answers (no version field), success or error.
        for old in [#"{"ok":true,"result":{"removed":1,"app":"x"}}"#, #"{"ok":false,"code":"notFound","error":"No."}"#,
                    #"{"version":1,"ok":true,"result":{}}"#] {
            let e = Self.error { () throws(DriveError) in try ControlAnswer<AppCloseAnswer>.decode(Data(old.utf8)).get() }
            XCTAssertEqual(e?.code, .protocolMismatch, old)
            XCTAssertEqual(e?.message, "This docdrive speaks control protocol \(ControlProtocol.version) but the mounted daemon speaks 1; remount the drive after upgrading.")
        }
        // An answer that is not one (a daemon that stopped half-way) is said as such.
        for bad in ["", #"{"version":3,"ok":true,"result":{"removed":"#, "=2\u{0}/mnt\u{0}"] {
            let e = Self.error { () throws(DriveError) in try ControlAnswer<AppCloseAnswer>.decode(Data(bad.utf8)).get() }
            XCTAssertEqual(e?.code, .io, bad)
            XCTAssertEqual(e?.message, "The daemon's answer could not be read (did it stop?).")
        }
    }

    /// `status-watch` is a line of its own; its answers are `status`'s, one per line, and a daemon
    /// before it answers the one sentence the command takes for "cannot push" (badRequest).
    func testStatusWatchIsOneLineAndItsAnswersAStreamOfStatuses() throws {
        let line = ControlRequest.statusWatch(.init()).line()
        XCTAssertEqual(line.last, 0x0A)
        let object = try Self.object(line)
        XCTAssertEqual(object.count, 2)
        XCTAssertEqual(object["version"] as? Int, 3)
        XCTAssertEqual(object["command"] as? String, "status-watch")
        XCTAssertEqual(try ControlRequest.decode(Data(#"{"command":"status-watch","version":3}"#.utf8)), .statusWatch(.init()))
        XCTAssertNotEqual(ControlRequest.statusWatch(.init()), .status(.init()))
        let first = DriveStatus(items: 3, uploads: [.pending: 2, .synced: 1], waiting: 2, stores: [StoreStatus(name: "work", uploads: [.pending: 2])])
        var second = first
        (second.uploads, second.waiting, second.stores[0].uploads) = ([.synced: 3], 0, [.synced: 3])
        let stream = ControlAnswer.ok(first).line() + ControlAnswer.ok(second).line()
        let lines = stream.split(separator: 0x0A)
        XCTAssertEqual(lines.count, 2)
        XCTAssertEqual(try ControlAnswer<DriveStatus>.decode(Data(lines[0])).get(), first)
        XCTAssertEqual(try ControlAnswer<DriveStatus>.decode(Data(lines[1])).get(), second)
        // What a daemon of protocol 3 without status-watch answers.
        let old = ControlAnswer<DriveStatus>.failed(DriveError(.badRequest, "Unknown request \"status-watch\".")).line()
        let e = Self.error { () throws(DriveError) in try ControlAnswer<DriveStatus>.decode(old).get() }
        XCTAssertEqual(e?.code, .badRequest)
    }

    /// The change signal: nothing is counted while nobody watches; a watcher wakes for a change
    /// made while it sleeps (and for one made between its ticket and its sleep), and for good at stop.
    func testStatusChangesWakeTheWatcherOnlyForAChange() {
        let changes = StatusChanges()
        let before = changes.ticket()
        changes.changed()
        XCTAssertEqual(changes.ticket(), before, "not counted without a watcher")
        changes.watching(true)
        var ticket = changes.ticket()
        changes.changed()
        XCTAssertTrue(changes.wait(after: ticket, timeout: 60), "a change before the sleep is not lost")
        XCTAssertNotEqual(changes.ticket(), ticket)
        ticket = changes.ticket()
        // Nothing changes: the sleep ends at its timeout, the ticket as it was.
        XCTAssertTrue(changes.wait(after: ticket, timeout: 0.05))
        XCTAssertEqual(changes.ticket(), ticket)
        let woke = expectation(description: "woken")
        Thread.detachNewThread { [ticket] in
            if changes.wait(after: ticket, timeout: 60), changes.ticket() != ticket { woke.fulfill() }
        }
        usleep(100_000)
        changes.changed()
        wait(for: [woke], timeout: 5)
        ticket = changes.ticket()
        let stopped = expectation(description: "stopped")
        Thread.detachNewThread { [ticket] in
            if !changes.wait(after: ticket, timeout: 60) { stopped.fulfill() }
        }
        usleep(100_000)
        changes.stop()
        wait(for: [stopped], timeout: 5)
        changes.watching(false)
    }

    func testUnknownCommandsAndMissingFieldsGetOneSentence() {
        let cases: [(String, String)] = [
            (#"{"version":3,"command":"format-disk"}"#, "Unknown request \"format-disk\"."),
            (#"{"version":3,"app":"x"}"#, "The request names no command."),
            (#"{"version":3,"command":"app-close"}"#, "The request lacks app."),
            (#"{"version":3,"command":"open","app":"x","path":"Work/a"}"#, "The request lacks noRename."),
            (#"{"version":3,"command":"query","expr":[],"in":[],"limit":"ten","count":false,"pathsOnly":false,"raw":false}"#,
             "The request's limit is not valid."),
            (#"{"version":3,"command":"query","expr":[],"in":[],"sort":"colour","count":false,"pathsOnly":false,"raw":false}"#,
             "The request's sort is not valid."),
            (#"{"version":"3","command":"status"}"#, "The request's version is not valid."),
        ]
        for (line, sentence) in cases {
            let e = Self.error { () throws(DriveError) in try ControlRequest.decode(Data(line.utf8)) }
            XCTAssertEqual(e?.code, .badRequest, line)
            XCTAssertEqual(e?.message, sentence, line)
        }
        // An empty text is missing too, as it always was (`docdrive open --app "" ...` exits 4).
        for line in [#"{"version":3,"command":"app-close","app":""}"#, #"{"version":3,"command":"move","app":"x","path":"a","to":"","noRename":false}"#] {
            let e = Self.error { () throws(DriveError) in try ControlRequest.decode(Data(line.utf8)) }
            XCTAssertEqual(e?.code, .invalidName, line)
            XCTAssertEqual(e?.message, line.contains("move") ? "The request lacks to." : "The request lacks app.", line)
        }
    }

    func testAnyBytesGetOneSentenceAndNoCrash() {
        let notJSON = "The request is not one JSON object on one line."
        var inputs: [Data] = [
            Data(), Data("{".utf8), Data(#"{"version":3,"command":"open","app":"#.utf8), Data("null".utf8), Data("[]".utf8),
            Data("42".utf8), Data(#""app-close""#.utf8), Data([0xFF, 0xFE, 0x00, 0x7B]), Data([0]),
            Data(#"{"version":3,"command":"app-close","app":"\#u{FFFD}"#.utf8) + Data([0xC3]) + Data(#""}"#.utf8),
            Data(String(repeating: "[", count: ControlProtocol.maxRequest).utf8),
            Data(String(repeating: #"{"a":"#, count: ControlProtocol.maxRequest / 5).utf8),
        ]
        // And random bytes, the same every run (SplitMix64: SignedTokenTests).
        var rng = SplitMix64(seed: 17)
        for _ in 0..<500 {
            inputs.append(Data((0..<Int(rng.next() % 300)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }))
        }
        for (i, input) in inputs.enumerated() {
            let e = Self.error { () throws(DriveError) in try ControlRequest.decode(input) }
            XCTAssertEqual(e?.code, .badRequest, "input \(i)")
            if i < 12 { XCTAssertEqual(e?.message, notJSON, "input \(i)") }
        }
    }

    func testAnOversizedLineIsRefusedUnread() throws {
        let padded = { (n: Int) -> Data in
            var d = Data(#"{"version":3,"command":"status"}"#.utf8)
            d.append(Data(repeating: 0x20, count: n - d.count))
            return d
        }
        XCTAssertEqual(try ControlRequest.decode(padded(ControlProtocol.maxRequest)), .status(.init()))
        let e = Self.error { () throws(DriveError) in try ControlRequest.decode(padded(ControlProtocol.maxRequest + 1)) }
        XCTAssertEqual(e?.code, .badRequest)
        XCTAssertEqual(e?.message, "The request is longer than 64 KiB.")
    }

    func testTheFastPathsLineIsTheTypedQuery() throws {
        let words = ["plain", "quo\"te", "back\\slash", "new\nline", "tab\t", "bell\u{7}", "del\u{7F}", "é", "日本", "🦓", "a/b", "", "-x"]
        let queries: [ControlRequest.Query] = [
            .init(expr: words, scopes: ["documents", "folder:Work/a \"b\""], pathsOnly: true, raw: true),
            .init(expr: [], scopes: [], sort: .modified, descending: false, limit: 0, count: true, pathsOnly: true, raw: true),
            .init(expr: ["zebra"], sort: .name, descending: true, limit: 25, pathsOnly: true, raw: true),
        ]
        for q in queries {
            let line = Data(q.fastPathLine().utf8)
            XCTAssertEqual(line.last, 0x0A)
            XCTAssertFalse(line.dropLast().contains(0x0A), "one line")
            XCTAssertEqual(try ControlRequest.decode(line.dropLast()), .query(q))
            // The same keys and version as the encoder's line.
            let fast = try Self.object(line), typed = try Self.object(ControlRequest.query(q).line())
            XCTAssertEqual(Set(fast.keys), Set(typed.keys))
            XCTAssertEqual(fast["version"] as? Int, ControlProtocol.version)
        }
    }

    // MARK: a real server

    func testTheServerAnswersEveryConnectionAndSurvivesAnyBytes() throws {
        // Given a daemon's control socket whose handler knows two requests
        let dir = NSTemporaryDirectory() + "dd-ctl-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let home = DriveHome(path: dir)
        try FileManager.default.createDirectory(atPath: home.runPath, withIntermediateDirectories: true)
        try home.writeMountRecord(MountRecord(pid: getpid(), mountpoint: dir + "/mnt", started: 0, options: ""))
        let server = try ControlServer(home: home, logger: Logger(label: "test")) { request, connection in
            switch request {
            case .appClose(let r):
                connection.answer { () throws(DriveError) in
                    guard r.app == "x" else { throw DriveError(.notFound, "There is no app \"\(r.app)\".") }
                    return AppCloseAnswer(app: r.app, removed: 2)
                }
            case .queryWatch:
                for n in 0..<3 { connection.send(ControlAnswer.ok(QueryAnswer(count: n))) }
            default:
                connection.send(DriveError(.unsupported, "Not in this test."))
            }
        }
        server.start()
        defer { server.stop() }

        // When a connection sends bytes that are no request, it gets one error line
        let oversized = Data(repeating: 0x41, count: ControlProtocol.maxRequest + 10_000)
        let junk: [(Data, DriveError.Code)] = [
            (Data("garbage\n".utf8), .badRequest), (Data([0xFF, 0x00, 0x0A]), .badRequest), (oversized, .badRequest),
            (Data(#"{"version":3,"command":"app-cl"#.utf8), .badRequest),  // truncated, then closed
            (Data(), .badRequest),  // nothing, then closed
            (Data(#"{"command":"app-close","app":"x"}"#.utf8 + [0x0A]), .protocolMismatch),
            (Data(#"{"version":3,"command":"nope"}"#.utf8 + [0x0A]), .badRequest),
        ]
        for (bytes, code) in junk {
            let answer = try Self.exchange(home, bytes)
            let object = try Self.object(answer)
            XCTAssertEqual(object["ok"] as? Bool, false, "\(bytes.prefix(40))")
            XCTAssertEqual(object["code"] as? String, code.description, "\(bytes.prefix(40))")
            XCTAssertEqual(object["version"] as? Int, ControlProtocol.version)
            XCTAssertEqual(answer.filter { $0 == 0x0A }.count, 1, "one line")
        }

        // Then it still serves: typed answers, typed errors, and streams
        XCTAssertEqual(try ControlClient.call(home, ControlRequest.AppClose(app: "x")), AppCloseAnswer(app: "x", removed: 2))
        let e = Self.error { () throws(DriveError) in try ControlClient.call(home, ControlRequest.AppClose(app: "y")) }
        XCTAssertEqual(e?.code, .notFound)
        XCTAssertEqual(e?.message, "There is no app \"y\".")
        var counts = [Int]()
        try ControlClient.stream(home, .queryWatch(.init(expr: []))) { (a: QueryAnswer) in
            counts.append(a.count ?? -1)
            return true
        }
        XCTAssertEqual(counts, [0, 1, 2])
    }

    /// Sends raw bytes on a new connection, closes its writing side, and reads the whole answer.
    static func exchange(_ home: DriveHome, _ bytes: Data) throws -> Data {
        let s = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        XCTAssertGreaterThanOrEqual(s, 0)
        defer { close(s) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let path = Array(home.controlSocketPath.utf8)
        withUnsafeMutableBytes(of: &addr.sun_path) { p in
            for (i, b) in path.enumerated() { p[i] = b }
            p[path.count] = 0
        }
        let r = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        XCTAssertEqual(r, 0, "connect")
        var tv = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        // The daemon may answer (and close) before it read everything: a refused write is fine.
        _ = bytes.withUnsafeBytes { p in p.count == 0 ? 0 : send(s, p.baseAddress!, p.count, Int32(MSG_NOSIGNAL)) }
        shutdown(s, Int32(SHUT_WR))
        var answer = Data()
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(s, &buf, buf.count)
            if n <= 0 { break }
            answer.append(contentsOf: buf[0..<n])
        }
        return answer
    }
}
