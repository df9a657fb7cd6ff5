// QueryTests: the query expression parser (every form, and random malformed expressions) and the
// query index's SQL over a made-up set of rows.
import Foundation
import XCTest
import CDocDriveSys
import DocDriveCore
import GRDB

final class QueryTests: XCTestCase {
    // 2026-11-22 12:00 UTC, read in UTC.
    let now = Date(timeIntervalSince1970: 1_795_348_800)
    var utc: Calendar {
        var c = Calendar(identifier: .gregorian)
        c.timeZone = TimeZone(identifier: "UTC")!
        return c
    }
    var parser: QueryParser { QueryParser(now: now, calendar: utc) }

    func parse(_ s: String) throws -> QueryNode { try parser.parse(s) }

    func testWordsAreFoldedAndJoinedByAnd() throws {
        XCTAssertEqual(try parse(""), .all)
        XCTAssertEqual(try parse("Report"), .term(.word("report")))
        XCTAssertEqual(try parse("Résumé ÉTÉ"), .and([.term(.word("resume")), .term(.word("ete"))]))
        XCTAssertEqual(try parse("\"my report\""), .term(.word("my report")))
        XCTAssertEqual(try parse("\"kind:pdf\""), .term(.word("kind:pdf")))
        XCTAssertEqual(try parse("a AND b"), .and([.term(.word("a")), .term(.word("b"))]))
        XCTAssertEqual(try parser.parse(["two words", "three"]), .and([.term(.word("two")), .term(.word("words")), .term(.word("three"))]))
        XCTAssertEqual(try parse("file-name"), .term(.word("file-name")))
        XCTAssertEqual(try parse("a\tb\nc"), .and([.term(.word("a")), .term(.word("b")), .term(.word("c"))]))
    }

    func testOrNotAndParentheses() throws {
        XCTAssertEqual(try parse("a OR b c"), .or([.term(.word("a")), .and([.term(.word("b")), .term(.word("c"))])]))
        XCTAssertEqual(try parse("(a OR b) c"), .and([.or([.term(.word("a")), .term(.word("b"))]), .term(.word("c"))]))
        XCTAssertEqual(try parse("-draft"), .not(.term(.word("draft"))))
        XCTAssertEqual(try parse("NOT draft"), .not(.term(.word("draft"))))
        XCTAssertEqual(try parse("- draft"), .not(.term(.word("draft"))))
        XCTAssertEqual(try parse("-(a OR b)"), .not(.or([.term(.word("a")), .term(.word("b"))])))
        XCTAssertEqual(try parse("--a"), .not(.not(.term(.word("a")))))
        XCTAssertEqual(try parse("((a))"), .term(.word("a")))
        XCTAssertEqual(try parse("or"), .term(.word("or")))
    }

    func testFields() throws {
        XCTAssertEqual(try parse("name:*.ODT"), .term(.nameGlob("*.odt")))
        XCTAssertEqual(try parse("name:\"my file*\""), .term(.nameGlob("my file*")))
        XCTAssertEqual(try parse("kind:document|image"), .term(.kind([.document, .image])))
        XCTAssertEqual(try parse("kind:PDF"), .term(.kind([.pdf])))
        XCTAssertEqual(try parse("kind:folder"), .term(.kind([.folder])))
        for k in QueryKind.allCases { XCTAssertEqual(try parse("kind:\(k.rawValue)"), .term(.kind([k]))) }
        XCTAssertEqual(try parse("status:pending|failed"), .term(.status([.pending, .failed])))
        for s in QueryStatus.allCases { XCTAssertEqual(try parse("status:\(s.rawValue)"), .term(.status([s]))) }
        XCTAssertEqual(try parse("tag:Work"), .term(.tag("work")))
        XCTAssertEqual(try parse("app:org.example.notes"), .term(.app("org.example.notes")))
        XCTAssertEqual(try parse("store:archive"), .term(.store("archive")))
        XCTAssertEqual(try parse("external"), .term(.external))
        XCTAssertEqual(try parse("\"external\""), .term(.word("external")))
    }

    func testSizes() throws {
        XCTAssertEqual(try parse("size>1M"), .term(.size(min: 1_048_577, max: nil)))
        XCTAssertEqual(try parse("size>=1M"), .term(.size(min: 1_048_576, max: nil)))
        XCTAssertEqual(try parse("size<10k"), .term(.size(min: nil, max: 10_239)))
        XCTAssertEqual(try parse("size<=10KiB"), .term(.size(min: nil, max: 10_240)))
        XCTAssertEqual(try parse("size:500"), .term(.size(min: 500, max: 500)))
        XCTAssertEqual(try parse("size=1.5M"), .term(.size(min: 1_572_864, max: 1_572_864)))
        XCTAssertEqual(try parse("size>2G"), .term(.size(min: 2_147_483_649, max: nil)))
        XCTAssertEqual(try parse("size>3MB"), .term(.size(min: 3_145_729, max: nil)))
    }

    func testDates() throws {
        let today = 1_795_305_600.0  // 2026-11-22 00:00 UTC
        XCTAssertEqual(try parse("modified:today"), .term(.modified(from: today, until: today + 86400)))
        XCTAssertEqual(try parse("modified:yesterday"), .term(.modified(from: today - 86400, until: today)))
        let nov1 = 1_793_491_200.0  // 2026-11-01 00:00 UTC
        XCTAssertEqual(try parse("modified>2026-11-01"), .term(.modified(from: nov1 + 86400, until: nil)))
        XCTAssertEqual(try parse("modified>=2026-11-01"), .term(.modified(from: nov1, until: nil)))
        XCTAssertEqual(try parse("modified<2026-11-01"), .term(.modified(from: nil, until: nov1)))
        XCTAssertEqual(try parse("modified:2026-11-01"), .term(.modified(from: nov1, until: nov1 + 86400)))
        let t = now.timeIntervalSince1970
        XCTAssertEqual(try parse("modified<7d"), .term(.modified(from: t - 7 * 86400, until: nil)))
        XCTAssertEqual(try parse("modified>2h"), .term(.modified(from: nil, until: t - 7200)))
        XCTAssertEqual(try parse("modified:30m"), .term(.modified(from: t - 1800, until: nil)))
        XCTAssertEqual(try parse("modified<1w"), .term(.modified(from: t - 7 * 86400, until: nil)))
    }

    func testErrorsPointAtTheBadTerm() {
        let cases: [(String, String)] = [
            ("colour:red", "\"colour:red\" names the unknown field \"colour\""),
            ("kind:", "\"kind:\" has no value"),
            ("kind:movie", "unknown kind \"movie\""),
            ("size>big", "\"size>big\" has the size \"big\""),
            ("modified>someday", "\"modified>someday\" has \"someday\""),
            ("modified:2026-02-30", "\"modified:2026-02-30\""),
            ("status:lost", "unknown status \"lost\""),
            ("name>a", "only size and modified compare"),
            ("(a", "\"(\" is never closed"),
            ("a)", "\")\" closes no \"(\""),
            ("()", "\"()\" holds no term"),
            ("a OR", "\"OR\" needs a term after it"),
            ("OR a", "\"OR\" needs a term before it"),
            ("a -", "\"-\" must be followed by a term"),
            ("\"open", "is never closed"),
            (":x", "has no field"),
            ("app:../x", "is not an app id"),
        ]
        for (expr, fragment) in cases {
            XCTAssertThrowsError(try parse(expr), expr) { e in
                let d = e as! DriveError
                XCTAssertEqual(d.code, .invalidName, expr)
                XCTAssertTrue(d.message.contains(fragment), "\(expr): \(d.message)")
                XCTAssertTrue(d.message.hasPrefix("The query expression is not valid: ") && d.message.hasSuffix("."), d.message)
                XCTAssertFalse(d.message.dropLast().contains("\n"), d.message)
            }
        }
    }

    /// 1,000 random malformed expressions: each gives an error (never a crash, never a result).
    func testRandomMalformedExpressionsGiveAnError() {
        let seed = UInt64(ProcessInfo.processInfo.environment["QUERY_FUZZ_SEED"].flatMap { UInt64($0) } ?? UInt64(Date().timeIntervalSince1970 * 1000))
        print("QueryTests fuzz seed: \(seed) (QUERY_FUZZ_SEED=\(seed) repeats it)")
        var rng = SplitMix64(seed: seed)
        let good = ["report", "name:*.odt", "kind:pdf", "size>1M", "modified:today", "status:synced", "tag:work",
                    "app:org.x", "store:archive", "external", "\"a b\"", "-draft", "(a OR b)", "Été"]
        // Each breaks an expression wherever it is put (joined by spaces).
        let broken = ["(", ")", "OR", "AND", "-", "NOT", "colour:red", "kind:", "kind:movie", "size>", "size>x1",
                      "size<<1", "modified>never", "modified:2026-13-01", "status:lost", "name<a", "tag>x", "\"unclosed",
                      ":x", "app:..", "kind:pdf|", "size:1.2.3M", "modified<7q", "\u{01}", "()"]
        for i in 0..<1000 {
            var parts = [String]()
            for _ in 0..<Int(rng.next() % 5) { parts.append(good[Int(rng.next() % UInt64(good.count))]) }
            let bad = broken[Int(rng.next() % UInt64(broken.count))]
            parts.insert(bad, at: Int(rng.next() % UInt64(parts.count + 1)))
            // Some random bytes too, kept away from the broken term.
            if rng.next() % 3 == 0 {
                let junk = String((0..<Int(rng.next() % 6)).map { _ in Character(Unicode.Scalar(UInt8(97 + rng.next() % 26))) })
                if !junk.isEmpty { parts.insert(junk, at: 0) }
            }
            let expr = parts.joined(separator: " ")
            // "-" and "NOT" before nothing, "OR"/"AND" at an edge or doubled are errors; a "-" or "NOT"
            // just before a good term is not: make sure the broken token is not fixed by its neighbour.
            if ["-", "NOT"].contains(bad), parts.last != bad { parts.append("-"); }
            if ["OR", "AND"].contains(bad), parts.first != bad, parts.last != bad { parts.append("OR") }
            if bad == ")" { parts.insert(")", at: 0) }
            if bad == "(" { parts.append("(") }
            let final = parts.joined(separator: " ")
            XCTAssertThrowsError(try parse(final), "case \(i), seed \(seed): \(final) (from \(expr)) parsed") { e in
                guard let d = e as? DriveError else { return XCTFail("case \(i): \(e)") }
                XCTAssertEqual(d.code, .invalidName)
                XCTAssertTrue(d.message.hasPrefix("The query expression is not valid: "), d.message)
            }
        }
    }

    // MARK: the index

    func makeIndex() throws -> (QueryIndex, String) {
        let dir = NSTemporaryDirectory() + "/query-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return (try QueryIndex(path: dir + "/q.sqlite", itemIndexPath: nil), dir)
    }

    func row(_ root: String, _ path: String, kind: String = "other", size: Int64 = 0, mtime: Double = 0, tags: String = "",
             ref: Bool = false, target: String? = nil) -> QueryRow {
        QueryRow(root: root, path: path, name: String(path.split(separator: "/").last!), kind: kind, size: size, mtime: mtime,
                 tags: tags, ref: ref, targetRoot: target == nil ? nil : "store:work", targetPath: target)
    }

    /// The query index attaches the drive's index (to read upload states) but writes only its
    /// own file: a batch goes in while another connection holds the drive's index's write lock
    /// (as the sync's and the uploader's writes do all the time). With GRDB's default IMMEDIATE
    /// transaction it waited 10 s for that lock and was given up (SQLITE_BUSY).
    func testTheQueryIndexWritesWhileTheDrivesIndexIsBeingWritten() throws {
        let dir = NSTemporaryDirectory() + "/query-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let items = try ItemIndex(path: dir + "/i.sqlite")
        let idx = try QueryIndex(path: dir + "/q.sqlite", itemIndexPath: dir + "/i.sqlite")
        var config = Configuration()
        config.busyMode = .immediateError
        let other = try DatabaseQueue(path: dir + "/i.sqlite", configuration: config)
        try other.writeWithoutTransaction { db in
            try db.execute(sql: "BEGIN IMMEDIATE")
            defer { try? db.execute(sql: "ROLLBACK") }
            let changed = try idx.apply(upserts: [row("store:work", "a.txt", kind: "document")], deletes: [], subtreeDeletes: [])
            XCTAssertEqual(changed, [QueryKey(root: "store:work", path: "a.txt")])
        }
        XCTAssertEqual(try idx.count(), 1)
        _ = items
    }

    func testSearchOverRows() throws {
        // Given rows in two apps' Documents and Data and in a store
        let (idx, dir) = try makeIndex()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        _ = try idx.apply(upserts: [
            row("app:org.a:Documents", "Report.odt", kind: "document", size: 2_000_000, mtime: 100, tags: ",work,"),
            row("app:org.a:Documents", "sub", kind: "folder"),
            row("app:org.a:Documents", "sub/Été.txt", kind: "text", size: 10, mtime: 200),
            row("app:org.a:Data", "secret-report.db", size: 5),
            row("app:org.a:Documents", "plan.pdf", kind: "document", size: 30, ref: true, target: "plan.pdf"),
            row("store:work", "plan.pdf", kind: "pdf", size: 30, mtime: 300),
            row("store:work", "photo.png", kind: "image", size: 3_000_000, mtime: 400),
        ], deletes: [], subtreeDeletes: [])
        func paths(_ e: String, _ scopes: [QueryScope] = [], sort: QuerySort? = nil) throws -> [String] {
            try idx.search(parser.parse(e), scopes: scopes, sort: sort).map { $0.root + "/" + $0.path }
        }
        // Then each term and scope selects what it says
        XCTAssertEqual(try paths("report"), ["app:org.a:Documents/Report.odt"])
        XCTAssertEqual(try paths("report", [.data]), ["app:org.a:Data/secret-report.db"])
        XCTAssertEqual(try paths("ete"), ["app:org.a:Documents/sub/Été.txt"])
        XCTAssertEqual(try paths("name:*.odt"), ["app:org.a:Documents/Report.odt"])
        XCTAssertEqual(try paths("kind:image"), ["store:work/photo.png"])
        XCTAssertEqual(try paths("kind:folder"), ["app:org.a:Documents/sub"])
        XCTAssertEqual(try paths("size>1M", sort: .size), ["app:org.a:Documents/Report.odt", "store:work/photo.png"])
        XCTAssertEqual(try paths("kind:document size>1M"), ["app:org.a:Documents/Report.odt"])
        XCTAssertEqual(try paths("tag:work"), ["app:org.a:Documents/Report.odt"])
        XCTAssertEqual(try paths("external"), ["app:org.a:Documents/plan.pdf"])
        XCTAssertEqual(try paths("", [.external]), ["app:org.a:Documents/plan.pdf", "store:work/plan.pdf"])
        XCTAssertEqual(try paths("store:work -kind:image"), ["store:work/plan.pdf"])
        XCTAssertEqual(try paths("app:org.a kind:text OR kind:image", sort: .name), ["app:org.a:Documents/sub/Été.txt", "store:work/photo.png"])
        XCTAssertEqual(try paths("", [.folder(root: "app:org.a:Documents", prefix: "sub")]), ["app:org.a:Documents/sub/Été.txt"])
        XCTAssertEqual(try paths("", [.app("org.a")]).count, 5)
        XCTAssertEqual(try paths("modified<1970-01-02 modified>=1970-01-01 kind:pdf"), ["store:work/plan.pdf"])
        // When the folder goes, its subtree goes with it
        let gone = try idx.apply(upserts: [], deletes: [QueryKey(root: "app:org.a:Documents", path: "sub")],
                                 subtreeDeletes: [QueryKey(root: "app:org.a:Documents", path: "sub")])
        XCTAssertEqual(Set(gone.map { $0.path }), ["sub", "sub/Été.txt"])
        XCTAssertEqual(try paths("ete"), [])
    }

    func testRandomWordsAndGlobsFindWhatTheySay() throws {
        // Given 400 random names over a small alphabet (with quotes, spaces and dashes) in one store
        let (idx, dir) = try makeIndex()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var rng = SplitMix64(seed: 17)
        let letters = ["a", "b", "c", "\"", " ", "-"]
        func text(_ n: Int) -> String { (0..<n).map { _ in letters[Int(rng.next() % UInt64(letters.count))] }.joined() }
        let names = Set((0..<400).map { _ in text(1 + Int(rng.next() % 9)) })
        _ = try idx.apply(upserts: names.map { row("store:t", $0) }, deletes: [], subtreeDeletes: [])
        func found(_ t: QueryTerm) throws -> Set<String> {
            Set(try idx.search(.term(t), scopes: [.folder(root: "store:t", prefix: "")]).map(\.path))
        }
        // Then every word and glob finds exactly the names that contain it or that fnmatch(3) matches
        let globParts = ["*", "?", "a", "b", "ab", "\"", "[ab]", "[]a]", "[^a]", " ", "abc"]
        for i in 0..<300 {
            let w = text(1 + Int(rng.next() % 5))
            XCTAssertEqual(try found(.word(w)), names.filter { $0.contains(w) }, "word \(i): \(w)")
            let g = (0..<(1 + Int(rng.next() % 4))).map { _ in globParts[Int(rng.next() % UInt64(globParts.count))] }.joined()
            // (without a wildcard, name: means "contains")
            let wild = g.contains { "*?[".contains($0) }
            XCTAssertEqual(try found(.nameGlob(g)), names.filter { wild ? fnmatch(g, $0, 0) == 0 : $0.contains(g) }, "glob \(i): \(g)")
        }
        // And a deleted row is found no more
        let one = names.first { $0.count >= 3 }!
        _ = try idx.apply(upserts: [], deletes: [QueryKey(root: "store:t", path: one)], subtreeDeletes: [])
        XCTAssertFalse(try found(.word(one)).contains(one))
    }
}

// MARK: the names in memory

final class QueryNamesTests: XCTestCase {
    func makeIndex() throws -> (QueryIndex, String) {
        let dir = NSTemporaryDirectory() + "/query-names-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return (try QueryIndex(path: dir + "/q.sqlite", itemIndexPath: nil), dir)
    }

    func row(_ path: String, kind: String = "other") -> QueryRow {
        QueryRow(root: "store:t", path: path, name: path, kind: kind, size: 0, mtime: 0, tags: "", ref: false, targetRoot: nil, targetPath: nil)
    }

    func testScanFindsEveryEntryThatContainsTheWord() {
        // Given random NUL-ended entries over a small alphabet (long ones too: the scan compares
        // 16 positions at a time, so words cross those blocks and the buffer's end)
        var rng = SplitMix64(seed: 5)
        let letters = Array("abcé-".utf8)
        for round in 0..<200 {
            let entries = (0..<(1 + Int(rng.next() % 60))).map { _ in
                (0..<(1 + Int(rng.next() % 40))).map { _ in letters[Int(rng.next() % UInt64(letters.count))] }
            }
            let buf = entries.reduce(into: [UInt8]()) { b, e in b += e; b.append(0) }
            let needle = (0..<(1 + Int(rng.next() % 4))).map { _ in letters[Int(rng.next() % UInt64(letters.count))] }
            var starts = [UInt32](), at = 0
            for e in entries {
                starts.append(UInt32(at))
                at += e.count + 1
            }
            let expected = zip(entries, starts).filter { e, _ in
                e.count >= needle.count && (0...(e.count - needle.count)).contains { Array(e[$0..<($0 + needle.count)]) == needle }
            }.map(\.1)
            // When it scans with room for every hit, and with room for one fewer
            var out = [UInt32](repeating: 0, count: entries.count)
            let n = dd_scan_entries(buf, buf.count, needle, needle.count, &out, out.count)
            // Then it names exactly those entries, in order, and says when they are more than the room
            XCTAssertEqual(Array(out[0..<n]), expected, "round \(round)")
            if !expected.isEmpty {
                var small = [UInt32](repeating: 0, count: expected.count - 1)
                XCTAssertEqual(dd_scan_entries(buf, buf.count, needle, needle.count, &small, small.count), expected.count, "round \(round)")
            }
        }
    }

    func testNamesInMemoryAnswerAsTheSQLScanDoes() throws {
        // Given 3,000 random names in one store, read into memory, then changed (rows deleted,
        // the last rowids given to new rows, rows rewritten) without a rebuild
        let (idx, dir) = try makeIndex()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var rng = SplitMix64(seed: 23)
        let syllables = ["re", "port", "zé", "bra", "ta", "x", "-", " ", "plan", "Ä"]
        func name() -> String { (0..<(1 + Int(rng.next() % 6))).map { _ in syllables[Int(rng.next() % UInt64(syllables.count))] }.joined() }
        var names = Set((0..<3000).map { _ in name() })
        _ = try idx.apply(upserts: names.sorted().map { row($0) }, deletes: [], subtreeDeletes: [])
        try idx.rebuildNames()
        let sorted = names.sorted()
        let dropped = Array(sorted.suffix(200)) + sorted.prefix(100)
        _ = try idx.apply(upserts: [], deletes: dropped.map { QueryKey(root: "store:t", path: $0) }, subtreeDeletes: [])
        names.subtract(dropped)
        let added = Set((0..<300).map { _ in name() + "new" }).subtracting(names)
        _ = try idx.apply(upserts: added.map { row($0) } + names.prefix(50).map { row($0, kind: "text") }, deletes: [], subtreeDeletes: [])
        names.formUnion(added)
        let parser = QueryParser()
        // Then every word finds, through the names in memory, what the SQL scan finds and what the
        // names contain (folded), alone and with another term
        var inMemory = 0
        for i in 0..<150 {
            let word = (0..<(1 + Int(rng.next() % 2))).map { _ in syllables[Int(rng.next() % UInt64(syllables.count))] }.joined()
            for expr in ["\"\(word)\"", "\"\(word)\" -kind:text", "\"\(word)\" OR kind:text"] {
                let node = try parser.parse(expr)
                if idx.nameCandidates(node) != nil { inMemory += 1 }
                let memory = Set(try idx.search(node, scopes: []).map(\.path))
                idx.clearNames()
                let sql = Set(try idx.search(node, scopes: []).map(\.path))
                let counted = try idx.count(node, scopes: [])
                try idx.rebuildNames()
                XCTAssertEqual(memory, sql, "\(i): \(expr)")
                XCTAssertEqual(counted, sql.count, "\(i): \(expr)")
                if expr.hasPrefix("\"") && !expr.contains("kind") {
                    XCTAssertEqual(memory, names.filter { QueryParser.fold($0).contains(QueryParser.fold(word)) }, "\(i): \(expr)")
                }
            }
        }
        // And the names in memory answered most of them (not the OR, and not the words with more
        // rows than they name)
        XCTAssertGreaterThan(inMemory, 150)
    }

    func testARowidGivenAgainIsFound() throws {
        // Given names in memory whose last row is deleted, and a new row that gets its rowid again
        let (idx, dir) = try makeIndex()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        _ = try idx.apply(upserts: [row("first.txt"), row("zebra.odt")], deletes: [], subtreeDeletes: [])
        try idx.rebuildNames()
        _ = try idx.apply(upserts: [], deletes: [QueryKey(root: "store:t", path: "zebra.odt")], subtreeDeletes: [])
        _ = try idx.apply(upserts: [row("quagga.odt")], deletes: [], subtreeDeletes: [])
        // Then the new name is found, and the old one no more
        let parser = QueryParser()
        XCTAssertNotNil(idx.nameCandidates(try parser.parse("quagga")))
        XCTAssertEqual(try idx.search(parser.parse("quagga"), scopes: []).map(\.path), ["quagga.odt"])
        XCTAssertEqual(try idx.search(parser.parse("zebra"), scopes: []).map(\.path), [])
        XCTAssertEqual(try idx.count(parser.parse("zebra"), scopes: []), 0)
    }
}
