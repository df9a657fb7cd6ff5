// The seeds of the corpora: what the program itself writes (metadata, headers, keys, the answers
// file, the config, tokens, control lines) and real examples of what others send (S3's XML).
// `DOCDRIVE_FUZZ_SEEDS=DIR docdrive-fuzz` writes them to DIR/TARGET/ and exits; fuzz.sh --seeds
// merges them into Fuzz/corpus.
@testable import DocDriveCore
import DocDriveWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<CInt>?, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?) -> CInt {
    if let dir = ProcessInfo.processInfo.environment["DOCDRIVE_FUZZ_SEEDS"] {
        Seeds.write(to: dir)
        exit(0)
    }
    _ = chosen
    return 0
}

enum Seeds {
    static func write(to dir: String) {
        var n = 0
        for (target, seeds) in all() {
            try? FileManager.default.createDirectory(atPath: dir + "/" + target, withIntermediateDirectories: true)
            for (i, s) in seeds.enumerated() {
                FileManager.default.createFile(atPath: "\(dir)/\(target)/seed-\(i)", contents: Data(s))
                n += 1
            }
        }
        print("docdrive-fuzz: wrote \(n) seeds to \(dir)")
    }

    static let metas: [RemoteMeta] = [
        RemoteMeta(),
        RemoteMeta(itemID: "0b9c4f7e-5d3a-4e2b-9f1c-2a7d8e6b5c4a", deviceID: "5f2a9c0e1b7d4e3f8a6c9b0d2e4f6a8c",
                   deviceName: "Zoë's laptop", mtimeNanoseconds: 1_700_000_000_123_456_789, mode: 0o644,
                   origin: "12:1700000000.123456789:77 0123456789abcdef", parent: "d41d8cd98f00b204e9800998ecf8427e"),
        RemoteMeta(itemID: "x", mtimeNanoseconds: -1_500_000_000, mode: 0o4755, parent: RemoteMeta.created),
        RemoteMeta(deviceName: "tab\there \"quoted\" \\ \u{1} \u{1F600}", mtimeNanoseconds: Int64.max),
        RemoteMeta(mtimeNanoseconds: Int64.min, mode: UInt32.max),
    ]

    static func all() -> [(String, [[UInt8]])] {
        var out = [(String, [[UInt8]])]()

        // remote-meta: the writer's JSON and JSONEncoder's (what older versions wrote).
        out.append(("remote-meta", metas.map(\.jsonBytes) + metas.compactMap { try? JSONEncoder().encode($0) }.map { [UInt8]($0) }
            + [Array(#"{"itemID":"a","mtimeNanoseconds":1.5e9,"extra":[1,{"b":null}]}"#.utf8),
               Array(#" { "deviceName" : "\ud83d\ude00\u00e9\n" , "mode" : null } "#.utf8)]))

        // s3-xml: answers as AWS and SeaweedFS write them.
        let xml = [
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>docs</Name><Prefix>store/</Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated><Contents><Key>store/Reports/q3%20report.odt</Key><LastModified>2026-11-23T02:09:38.000Z</LastModified><ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag><Size>12345</Size><StorageClass>STANDARD</StorageClass></Contents><Contents><Key>store/~dd~caf%25E9.txt</Key><LastModified>2262-04-12T00:00:00.000Z</LastModified><ETag>"0123456789abcdef0123456789abcdef-3"</ETag><Size>0</Size></Contents><Contents><Key>store/a+b/</Key><LastModified>1901-12-13T20:45:52Z</LastModified><ETag>W/"x"</ETag><Size>-1</Size></Contents><NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken></ListBucketResult>
            """,
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <ListBucketResult><Name>docs</Name><Contents><Key>store/R&#xE9;sum&#233; &amp; &lt;x&gt;.txt</Key><LastModified>9999-12-31T23:59:59.999Z</LastModified><ETag>"e"</ETag><Size>9223372036854775807</Size></Contents><IsTruncated>false</IsTruncated></ListBucketResult>
            """,
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <Error><Code>RequestTimeTooSkewed</Code><Message>The difference between the request time and the current time is too large.</Message><ServerTime>2026-11-23T02:09:38Z</ServerTime><RequestId>4442587FB7D0A2F9</RequestId></Error>
            """,
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>docs</Bucket><Key>store/big.iso</Key><UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId></InitiateMultipartUploadResult>
            """,
            """
            <ListMultipartUploadsResult><Bucket>docs</Bucket><Upload><Key>store/big.iso</Key><UploadId>abc</UploadId><Initiated>2026-11-23T02:09:38.000Z</Initiated></Upload><Upload><Key>store/x</Key><UploadId/></Upload></ListMultipartUploadsResult>
            """,
            """
            <CopyPartResult><ETag>"b54357faf0632cce46e942fa68356b38"</ETag><LastModified>2026-11-23T02:09:38.000Z</LastModified></CopyPartResult>
            """,
        ]
        out.append(("s3-xml", xml.map { Array($0.utf8) }))

        // s3-headers: what a HEAD answers for an object this drive wrote, and for rclone's.
        var headers = [[UInt8]]()
        for m in metas {
            var text = "HTTP/1.1 200 OK\r\nContent-Length: 12345\r\nETag: \"d41d8cd98f00b204e9800998ecf8427e\"\r\nLast-Modified: Mon, 23 Nov 2026 02:09:38 GMT\r\nDate: Mon, 23 Nov 2026 02:09:39 GMT\r\n"
            for (n, v) in S3Meta.headers(m, link: m.mode == 0o4755, upload: "0123456789abcdef") { text += "\(n): \(v)\r\n" }
            headers.append(Array(text.utf8))
        }
        headers.append(Array("x-amz-meta-mtime: 1700000000.5\r\nLast-Modified: Thu, 01 Jan 1970 00:00:00 GMT\r\n".utf8))
        headers.append(Array("-9300000000.123456789123".utf8))
        out.append(("s3-headers", headers))

        // s3-keys: keys this drive writes (prefix chosen by the first byte), and paths.
        let paths: [[UInt8]] = [Array("Reports/q3 report.odt".utf8), [0x63, 0x61, 0x66, 0xE9, 0x2E, 0x74], Array("a\tb/\u{7F}c".utf8),
                                Array(".docdrive-store".utf8), Array("~dd~x/~dd~%41".utf8), Array("100%.txt".utf8),
                                Array("\u{301}combining/é".utf8), [0xF0, 0x9F, 0x98], Array("..".utf8)]
        var keySeeds = [[UInt8]]()
        for (i, p) in paths.enumerated() {
            let keys = S3Keys(prefix: ["", "store", "a/b", "/x//y/"][i % 4])
            keySeeds.append([UInt8(i % 4)] + p)
            if let k = try? keys.key(StorePath(bytes: p)) { keySeeds.append([UInt8(i % 4)] + Array(k.utf8)) }
        }
        out.append(("s3-keys", keySeeds))

        // s3-answers: a file the cache writes (its magic line and checksum taken off).
        let cache = S3HeadCache()
        for (i, m) in metas.enumerated() {
            cache.keep(S3Remote.Head(etag: i == 1 ? "d41d8cd98f00b204e9800998ecf8427e" : "etag-\(i)", size: [0, 12345, -1, Int64.max, 7][i],
                                     meta: m, link: i == 2, upload: i == 3 ? "0123456789abcdef" : nil,
                                     modified: i == 1 ? "20261123020938" : nil, answered: i == 4 ? "20261123020939" : nil),
                       for: "store/file-\(i)")
        }
        let path = scratch + "/seed-answers"
        _ = try? cache.write(to: path, identity: FuzzS3Answers.identity)
        if let file = FileManager.default.contents(atPath: path) {
            let b = [UInt8](file)
            out.append(("s3-answers", [Array(b[S3HeadCache.fileMagic.count..<(b.count - 32)])]))
        }

        // config: the tests' configs and what `docdrive` writes back.
        let configs = [
            "apps:\n  - id: org.example.notes\n    name: Notes\n    public: true\n  - id: org.example.secret\nstores:\n  - name: work\n    display: Work\n    remote: {type: folder, path: /srv/work}\n",
            "stores:\n  - name: b\n    remote: {type: s3, endpoint: \"http://127.0.0.1:8333\", bucket: docs, conditional-writes: checked}\n",
            "apps:\n  - id: a\n    name: [unclosed\n",
            """
            apps:
              - {id: org.example.writer, name: "Writer", public: yes}
            stores:
              - name: work
                display: "Work \\u00e9"
                writeback: 2.5
                workers: 12
                bandwidth: 10M/s
                poll: 0x1e
                content: on-demand
                cache-limit: 20G
                indexers: download
                readahead: off
                remote:
                  type: s3
                  endpoint: https://s3.eu-west-1.amazonaws.com
                  bucket: docs
                  prefix: tour/a
                  region: eu-west-1
                  path-style: true
                  credentials-file: ~/.aws/credentials
                  part-size: 16M
                  parallel-parts: 8
                  conditional-writes: required
              - name: archive
                workers: 1_0
                poll: 1:30
                writeback: .inf
                remote: {type: folder, path: /srv/nas}
            """,
        ]
        var configSeeds = configs.map { Array($0.utf8) }
        for c in configs { if let parsed = try? DriveConfig.parse(c, file: "config") { configSeeds.append(Array(parsed.yaml().utf8)) } }
        out.append(("config", configSeeds))

        // bookmark, reference: sealed tokens (first byte 0) and payloads to seal (first byte 1).
        let bookmark = BookmarkPayload(app: "org.example.notes", root: "store:work", item: "0b9c4f7e-5d3a-4e2b-9f1c-2a7d8e6b5c4a",
                                       path: "Reports/q3.odt", created: 1_800_000_000.25, handle: "CAAAAAEAAAB7AAAAAAAAAA==")
        let reference = ReferencePayload(app: "org.example.notes", store: "work", item: "0b9c4f7e-5d3a-4e2b-9f1c-2a7d8e6b5c4a",
                                         hint: "Reports/q3.odt", handle: "CAAAAAEAAAB7AAAAAAAAAA==", created: -1e300)
        let enc = JSONEncoder()
        enc.outputFormatting = .sortedKeys
        out.append(("bookmark", [[0] + Array(SignedToken.seal(bookmark, purpose: .bookmark, key: FuzzTokens.key).utf8),
                                 [1] + [UInt8]((try? enc.encode(bookmark)) ?? Data())]))
        out.append(("reference", [[0, 1] + Array(ReferenceLink.encode(reference, key: FuzzTokens.key).utf8),
                                  [1] + [UInt8]((try? enc.encode(reference)) ?? Data())]))

        // query: expressions of the tests (arguments NUL between them).
        let queries = ["Report", "Résumé ÉTÉ", "\"my report\"", "a OR b c", "(a OR b) c", "-(a OR b)", "NOT draft", "name:\"my file*\"",
                       "kind:document|image", "status:pending|failed", "tag:Work", "app:org.example.notes", "store:archive", "external",
                       "size>1M\u{0}size<=10KiB", "size=1.5M", "modified:today", "modified>2026-11-01", "mtime<7d", "modified:yesterday",
                       "((((a))))", "kind:image size>2G -draft"]
        out.append(("query", queries.map { Array($0.utf8) }))

        // control: every request as the commands write it, and answers as the daemon does.
        let requests: [ControlRequest] = [
            .open(.init(app: "org.example.notes", path: "Work/a b.odt", name: "Mine.odt", into: "Sub/Dir", noRename: true)),
            .importDocument(.init(app: "org.example.notes", path: "Work/\"quoted\"\\.txt")),
            .move(.init(app: "org.example.notes", path: "Notes/d.odt", to: "Work/2026", noRename: false)),
            .export(.init(app: "org.example.notes", path: "Notes/d.odt", to: "Work", noRename: true)),
            .bookmarkCreate(.init(app: "org.example.notes", path: "Notes/é/ü.txt")),
            .bookmarkResolve(.init(app: "org.example.notes", token: "eyJhIjoxfQ.c2ln")),
            .grantsList(.init(app: "org.example.notes")), .grantsRevoke(.init(app: "org.example.notes", path: "Work/a.odt")),
            .appClose(.init(app: "org.example.notes")), .status(.init()), .syncPoll(.init(timeout: 12.5, retryFailed: true, compare: false)),
            .query(.init(expr: ["kind:image", "size>1M", "-draft"], scopes: ["documents", "folder:Work/x"], sort: .size,
                         descending: false, limit: 10, count: true, pathsOnly: true, raw: true)),
            .queryWatch(.init(expr: ["zebra"], scopes: ["Work"], sort: .name, descending: true)),
            .pin(.init(path: "Work/Reports", on: true)), .fill(.init(path: "Work/Reports/q3.odt")), .evict(.init(path: "Work")),
        ]
        var control = requests.map { [UInt8]($0.line()) }
        control.append([UInt8](ControlAnswer.ok(QueryAnswer(items: [QueryItem(path: "/m/Work/a.odt", name: "a.odt", kind: "document", size: 12, modified: 1.8e9)], count: 1)).line()))
        control.append([UInt8](ControlAnswer.ok(FillAnswer(path: "Work/a", size: Int64.max)).line()))
        control.append([UInt8](ControlAnswer.ok(DriveStatus(items: 3, uploads: [.pending: 1, .synced: 2], waiting: 1, stores: [
            StoreStatus(name: "work", uploads: [.pending: 1], bytesLeft: 12, runningWorkers: 4,
                        inFlight: [InFlightUpload(store: "work", path: "a b/é.bin", done: 1, total: 12)], held: true,
                        remote: RemoteState(lastPoll: 1.8e9, devices: ["laptop"])),
        ], references: [ReferenceRow(app: "x", path: "Notes/a.odt", status: "ok")], homeDiskFree: 1 << 30)).line()))
        control.append([UInt8](ControlAnswer<QueryAnswer>.failed(DriveError(.notFound, "No such file.")).line()))
        control.append(Array(#"{"version":1,"command":"sync-poll","timeout":1e308}"#.utf8))
        out.append(("control", control))

        // status: the requests a file manager extension sends.
        out.append(("status", ["status\t/m/a\t/m/b c", "subscribe\t/m/Work", "unsubscribe\t/m/Work", "conflicts\t/m/Work/x\\ty", "status",
                               "status\t/m/x\\n\\r\\\\"].map { Array(($0 + "\n").utf8) }))

        // query-wire: the raw answers the daemon writes to the front.
        out.append(("query-wire", [QueryWire.rawAnswer(mountpoint: "/home/u/Drive", count: nil, paths: ["Work/a.odt", "Notes/é.txt"]),
                                   QueryWire.rawAnswer(mountpoint: "/m", count: 3, paths: []),
                                   Array(ControlRequest.Query(expr: ["a\"b\\c\u{1}"], limit: 5).fastPathLine().utf8)]))

        // home-json: device.json and run/mount.json as the program writes them.
        var home = [[UInt8]]()
        let pretty = JSONEncoder()
        pretty.outputFormatting = [.prettyPrinted, .sortedKeys]
        if let d = try? pretty.encode(DeviceIdentity(id: "5f2a9c0e1b7d4e3f8a6c9b0d2e4f6a8c", name: "laptop")) { home.append([UInt8](d)) }
        if let d = try? JSONEncoder().encode(MountRecord(pid: 4242, mountpoint: "/home/u/Drive", started: 1.8e9, options: "uring", fileIO: "passthrough")) { home.append([UInt8](d)) }
        out.append(("home-json", home))

        // mountinfo: this machine's table, and lines with escapes.
        var mi = [[UInt8]]()
        if let t = FileManager.default.contents(atPath: "/proc/self/mountinfo") { mi.append([UInt8](t.prefix(4096))) }
        mi.append(Array("36 35 98:0 / /home/u/My\\040Drive rw,nosuid,nodev - fuse.docdrive docdrive\\011x rw,user_id=0\n".utf8))
        out.append(("mountinfo", mi))
        return out
    }
}
