// ConfigTests: reading, validating and writing config.yaml.
import DocDriveCore
import XCTest

final class ConfigTests: XCTestCase {
    func testParsesAppsAndStores() throws {
        // Given a config with one public app, one private app and one folder store
        let text = """
        apps:
          - id: org.example.notes
            name: Notes
            public: true
          - id: org.example.secret
        stores:
          - name: work
            display: Work
            remote: {type: folder, path: /srv/work}
        """
        // When it is parsed
        let c = try DriveConfig.parse(text, file: "config.yaml")
        // Then every field is read, with defaults for what is missing
        XCTAssertEqual(c.apps, [AppConfig(id: "org.example.notes", name: "Notes", isPublic: true),
                                AppConfig(id: "org.example.secret", name: "org.example.secret", isPublic: false)])
        XCTAssertEqual(c.stores, [StoreConfig(name: "work", displayName: "Work", remote: .folder(path: "/srv/work"))])
        XCTAssertEqual(c.topLevelNames, ["Notes", "Work"])
    }

    func testS3ConditionalWritesAreRequiredUnlessCheckedIsChosen() throws {
        func parse(_ extra: String) throws -> DriveConfig {
            try DriveConfig.parse("stores:\n  - name: b\n    remote: {type: s3, endpoint: \"http://127.0.0.1:8333\", bucket: docs\(extra)}\n",
                                  file: "config.yaml")
        }
        guard case .s3(let strict) = try parse("").stores[0].remote else { return XCTFail("not s3") }
        XCTAssertFalse(strict.checkedWrites)
        let checked = try parse(", conditional-writes: checked")
        guard case .s3(let weak) = checked.stores[0].remote else { return XCTFail("not s3") }
        XCTAssertTrue(weak.checkedWrites)
        // Written back, the choice stays.
        XCTAssertEqual(try DriveConfig.parse(checked.yaml(), file: "config.yaml"), checked)
        XCTAssertThrowsError(try parse(", conditional-writes: never")) { e in
            XCTAssertTrue("\(e)".contains("must be \"required\""), "\(e)")
        }
    }

    func testSyntaxErrorNamesFileAndLine() {
        let text = "apps:\n  - id: a\n    name: [unclosed\n"
        XCTAssertThrowsError(try DriveConfig.parse(text, file: "/h/config.yaml")) { e in
            let msg = (e as! DriveError).message
            XCTAssertTrue(msg.hasPrefix("/h/config.yaml: line "), msg)
        }
    }

    func testUnknownKeyNamesLine() {
        let text = "apps:\n  - id: a\n    nmae: Notes\n"
        XCTAssertThrowsError(try DriveConfig.parse(text, file: "c.yaml")) { e in
            let msg = (e as! DriveError).message
            XCTAssertTrue(msg.contains("line 3"), msg)
            XCTAssertTrue(msg.contains("nmae"), msg)
        }
    }

    func testWrongTypeIsExplained() {
        XCTAssertThrowsError(try DriveConfig.parse("apps:\n  - id: a\n    public: maybe\n", file: "c")) { e in
            XCTAssertTrue((e as! DriveError).message.contains("true or false"))
        }
        XCTAssertThrowsError(try DriveConfig.parse("stores:\n  - name: s\n    remote: {type: ftp, path: /x}\n", file: "c")) { e in
            XCTAssertTrue((e as! DriveError).message.contains("\"ftp\""))
        }
        XCTAssertThrowsError(try DriveConfig.parse("stores:\n  - name: s\n", file: "c")) { e in
            XCTAssertTrue((e as! DriveError).message.contains("has no remote"))
        }
    }

    func testTopLevelNamesMustBeUnique() {
        let c = DriveConfig(apps: [AppConfig(id: "a.b", name: "Work", isPublic: true)],
                            stores: [StoreConfig(name: "work", displayName: "Work", remote: .folder(path: "/x"))])
        XCTAssertThrowsError(try c.validate()) { e in
            XCTAssertTrue((e as! DriveError).message.contains("both show as \"Work\""))
        }
        // A private app does not show at the top, so it may share the name.
        let ok = DriveConfig(apps: [AppConfig(id: "a.b", name: "Work", isPublic: false)], stores: c.stores)
        XCTAssertNoThrow(try ok.validate())
    }

    func testBadNamesAreRefused() {
        for name in ["", ".hidden", "a/b", "..", String(repeating: "x", count: 256)] {
            let c = DriveConfig(apps: [AppConfig(id: "a.b", name: name, isPublic: true)])
            XCTAssertThrowsError(try c.validate(), "name \(name.debugDescription)")
        }
        for id in ["", "../x", "a b", "-x", "a/b"] {
            XCTAssertThrowsError(try DriveConfig(apps: [AppConfig(id: id, name: "N", isPublic: false)]).validate(), id)
        }
        XCTAssertThrowsError(try DriveConfig(stores: [StoreConfig(name: "Work", displayName: "W", remote: .folder(path: "/x"))]).validate())
        XCTAssertThrowsError(try DriveConfig(stores: [StoreConfig(name: "w", displayName: "W", remote: .folder(path: "rel"))]).validate())
    }

    func testWrittenConfigReadsBackTheSame() throws {
        // Given names that need quoting in YAML
        let c = DriveConfig(apps: [AppConfig(id: "org.x", name: "My \"Notes\": 2\\3 #no", isPublic: true),
                                   AppConfig(id: "org.y", name: "yes", isPublic: false)],
                            stores: [StoreConfig(name: "s3-x", displayName: "Ärchiv – alt", remote: .folder(path: "/mnt/nas: a"))])
        // When written and read again
        let back = try DriveConfig.parse(c.yaml(), file: "c")
        // Then nothing changed
        XCTAssertEqual(back, c)
        XCTAssertEqual(try DriveConfig.parse(DriveConfig().yaml(), file: "c"), DriveConfig())
    }

    func testEmptyFileIsAnEmptyDrive() throws {
        XCTAssertEqual(try DriveConfig.parse("", file: "c"), DriveConfig())
        XCTAssertEqual(try DriveConfig.parse("# only a comment\n", file: "c"), DriveConfig())
    }

    func testUploadSettingsAreReadWithDefaults() throws {
        let text = """
        stores:
          - name: a
            remote: {type: folder, path: /a}
          - name: b
            workers: 12
            bandwidth: 10M
            remote: {type: folder, path: /b}
          - name: c
            bandwidth: 2048
            remote: {type: folder, path: /c}
        """
        let c = try DriveConfig.parse(text, file: "c.yaml")
        XCTAssertEqual(c.stores.map(\.workers), [StoreConfig.defaultWorkers, 12, 4])
        XCTAssertEqual(c.stores.map(\.bandwidth), [nil, 10 << 20, 2048])
        // And they are written back
        XCTAssertEqual(try DriveConfig.parse(c.yaml(), file: "c"), c)
    }

    func testBadUploadSettingsNameTheLine() {
        for (line, what) in [("workers: 0", "workers"), ("workers: 65", "between 1 and 64"), ("workers: 2.5", "whole number"),
                             ("bandwidth: fast", "bandwidth"), ("bandwidth: 100", "at least 1K")] {
            let text = "stores:\n  - name: a\n    \(line)\n    remote: {type: folder, path: /a}\n"
            XCTAssertThrowsError(try DriveConfig.parse(text, file: "c.yaml"), line) { e in
                let msg = (e as! DriveError).message
                XCTAssertTrue(msg.hasPrefix("c.yaml: line 3: "), msg)
                XCTAssertTrue(msg.contains(what), msg)
                XCTAssertEqual((e as! DriveError).code, .invalidConfig)
            }
        }
    }

    func testABaseSixtyNumberIsRefusedNotATrap() {
        // YAML 1.1 reads "1:30" as 90; Yams traps when such a number overflows an Int, so a
        // config with one killed `docdrive` and the daemon (the fuzzer's input, Fuzz/corpus/config).
        for value in ["1:0:0:0:0:0:0:0:0:0:0:0", "9223372036854775807:0", "1:30"] {
            for key in ["workers", "parallel-parts"] {
                let text = key == "workers"
                    ? "stores:\n  - name: a\n    \(key): \(value)\n    remote: {type: folder, path: /a}\n"
                    : "stores:\n  - name: a\n    remote: {type: s3, endpoint: \"http://127.0.0.1:8333\", bucket: docs, \(key): \(value)}\n"
                XCTAssertThrowsError(try DriveConfig.parse(text, file: "c.yaml"), "\(key): \(value)") { e in
                    XCTAssertTrue((e as! DriveError).message.contains("must be a whole number"), (e as! DriveError).message)
                }
            }
        }
    }

    func testContentSettingsAreReadAndWrittenBack() throws {
        let text = """
        stores:
          - name: a
            remote: {type: folder, path: /a}
          - name: b
            content: on-demand
            cache-limit: 20G
            indexers: download
            readahead: off
            remote: {type: folder, path: /b}
        """
        let c = try DriveConfig.parse(text, file: "c.yaml")
        XCTAssertEqual(c.stores.map(\.content), [.allLocal, .onDemand])
        XCTAssertEqual(c.stores.map(\.cacheLimit), [nil, 20 << 30])
        XCTAssertEqual(c.stores.map(\.indexers), [.skip, .download])
        XCTAssertEqual(c.stores.map(\.readahead), [true, false])
        XCTAssertEqual(try DriveConfig.parse(c.yaml(), file: "c"), c)
        for (line, what) in [("indexers: never", "\"skip\""), ("content: lazy", "on-demand"), ("cache-limit: 10K", "at least 1M"), ("readahead: yes", "\"on\"")] {
            let bad = "stores:\n  - name: a\n    \(line)\n    remote: {type: folder, path: /a}\n"
            XCTAssertThrowsError(try DriveConfig.parse(bad, file: "c.yaml"), line) { e in
                let msg = (e as! DriveError).message
                XCTAssertTrue(msg.hasPrefix("c.yaml: line 3: ") && msg.contains(what), msg)
            }
        }
    }

    func testBackgroundReadersAreKnownByProgramName() {
        // This test's own process is no indexer; pid 0 and a pid that does not exist are none.
        XCTAssertNil(BackgroundReaders.indexer(pid: getpid()))
        XCTAssertNil(BackgroundReaders.indexer(pid: 0))
        XCTAssertNil(BackgroundReaders.indexer(pid: Int32.max))
        XCTAssertTrue(BackgroundReaders.programs.isSuperset(of: ["tracker-extract-3", "localsearch-extractor-3", "baloo_file_extractor"]))
    }

    func testBandwidthRates() {
        XCTAssertEqual(StoreConfig.parseBandwidth("500K"), 500 * 1024)
        XCTAssertEqual(StoreConfig.parseBandwidth("10M"), 10 << 20)
        XCTAssertEqual(StoreConfig.parseBandwidth("1.5MB/s"), 3 << 19)
        XCTAssertEqual(StoreConfig.parseBandwidth("1g"), 1 << 30)
        XCTAssertEqual(StoreConfig.parseBandwidth("4096"), 4096)
        XCTAssertEqual(StoreConfig.parseBandwidth("0"), 0)
        XCTAssertNil(StoreConfig.parseBandwidth("fast"))
        XCTAssertNil(StoreConfig.parseBandwidth("-1M"))
        XCTAssertNil(StoreConfig.parseBandwidth(""))
    }

    /// A store's reconcile time: a duration with a unit (or seconds), 1 s to 7 days, one hour when
    /// absent, written back as read; anything else is refused with its line.
    func testReconcileTimesAreReadCheckedAndWrittenBack() throws {
        XCTAssertEqual(StoreConfig.parseDuration("90"), 90)
        XCTAssertEqual(StoreConfig.parseDuration("90s"), 90)
        XCTAssertEqual(StoreConfig.parseDuration("10m"), 600)
        XCTAssertEqual(StoreConfig.parseDuration("1.5h"), 5400)
        XCTAssertEqual(StoreConfig.parseDuration("2D"), 172_800)
        XCTAssertNil(StoreConfig.parseDuration("soon"))
        XCTAssertNil(StoreConfig.parseDuration("-1h"))
        XCTAssertNil(StoreConfig.parseDuration(""))
        let text = """
        stores:
          - name: a
            remote: {type: folder, path: /tmp/a}
          - name: b
            reconcile: 10m
            remote: {type: folder, path: /tmp/b}
        """
        let c = try DriveConfig.parse(text, file: "config.yaml")
        XCTAssertEqual(c.stores.map(\.reconcile), [3600, 600])
        XCTAssertEqual(try DriveConfig.parse(c.yaml(), file: "config.yaml"), c)
        for (value, words) in [("soon", "a duration"), ("0.5s", "between 1 second and 7 days"), ("8d", "between 1 second and 7 days")] {
            let bad = text.replacingOccurrences(of: "reconcile: 10m", with: "reconcile: \(value)")
            XCTAssertThrowsError(try DriveConfig.parse(bad, file: "config.yaml")) { e in
                let m = (e as? DriveError)?.message ?? ""
                XCTAssertTrue(m.contains("line 5") && m.contains(words), m)
            }
        }
    }
}
