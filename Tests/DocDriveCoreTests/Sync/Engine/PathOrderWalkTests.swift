// PathOrderWalkTests: a walk of a folder tree meets its paths in the order of their bytes (the
// order the index keeps the bases in), and the bases come in that order a page at a time, so a
// store's local copy is compared with its bases side by side (StoreSync.compareLocal).
import DocDriveCore
import Foundation
import XCTest

final class PathOrderWalkTests: XCTestCase {
    var dir: String!

    override func setUp() {
        dir = NSTemporaryDirectory() + "dd-walk-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: dir)
    }

    let latin1: [UInt8] = [0x63, 0x61, 0x66, 0xE9]  // "café" in Latin-1: not UTF-8

    /// Makes `path` below the test's folder: a folder when it ends with "/", else a file.
    func make(_ path: [UInt8]) {
        let full = Array(dir.utf8) + [UInt8(ascii: "/")] + path
        let made = (full + [0]).withUnsafeBufferPointer { p in
            p.withMemoryRebound(to: CChar.self) { c in
                path.last == UInt8(ascii: "/") ? mkdir(c.baseAddress!, 0o755) : close(open(c.baseAddress!, O_CREAT | O_WRONLY, 0o644))
            }
        }
        XCTAssertEqual(made, 0, "made \(path)")
    }

    func testAWalkMeetsEveryPathInTheOrderOfItsBytes() throws {
        // Given names that sort around '/' ('-', '.', ' ' before it, '0' after), a folder and a
        // file beginning alike, names that are not UTF-8, an own name to skip and a link to a folder
        let folders: [[UInt8]] = ["a/", "a/b/", "ab/", "a-/", "é/", "x/", "x/.docdrive-tmp-1/"].map { Array($0.utf8) }
            + [latin1 + [UInt8(ascii: "/")], Array("x/".utf8) + latin1 + [UInt8(ascii: "/")]]
        let files: [[UInt8]] = ["a/x", "a/b/y", "a.txt", "a0", "a b", "ab/z", "a-/w", "é/a", "Z", "x/y", "x/.docdrive-tmp-1/hidden"].map { Array($0.utf8) }
            + [latin1 + Array("/in".utf8), latin1 + [0x30], Array("x/".utf8) + latin1 + Array("/é".utf8), Array("a/".utf8) + latin1]
        for f in folders + files { make(f) }
        XCTAssertEqual(symlink(dir + "/a", dir + "/link"), 0)
        let root = open(dir, O_RDONLY | O_DIRECTORY)
        XCTAssertGreaterThanOrEqual(root, 0)
        defer { close(root) }
        // When it is walked
        var met = [(StorePath, Bool)]()
        PathOrderWalk.walk(root, .store, skip: { $0.starts(with: Array(".docdrive-tmp".utf8)) }, stopped: { false }) { step in
            met.append((step.path, step.utf8))
        }
        // Then it meets every path once (not what is below the own name, nor through the link),
        // in the order of the bytes, and says which are UTF-8
        var want = (folders.map { StorePath(bytes: Array($0.dropLast())) } + files.map { StorePath(bytes: $0) } + ["link"])
            .filter { !$0.bytes.starts(with: Array("x/.docdrive".utf8)) }
        want.sort()
        XCTAssertEqual(met.map(\.0), want)
        XCTAssertEqual(met.map(\.1), want.map { $0.string != nil })
    }

    func testAWalkEndsWhenStopped() {
        for f in ["a/", "a/1", "a/2", "b"] { make(Array(f.utf8)) }
        let root = open(dir, O_RDONLY | O_DIRECTORY)
        defer { close(root) }
        var met = [StorePath]()
        PathOrderWalk.walk(root, .store, skip: { _ in false }, stopped: { met.count >= 2 }) { met.append($0.path) }
        XCTAssertEqual(met, ["a", "a/1"])
    }

    func testTheBasesOfAStoreComeInTheOrderOfTheirPathsBytesAPageAtATime() throws {
        // Given more bases than a page, some of them not UTF-8, in two stores
        let index = try ItemIndex(path: dir + "/order.sqlite")
        defer { index.stop() }
        var paths: [StorePath] = (0..<2_500).map { StorePath("f/\(($0 * 7919) % 2_500)") }
        paths += ["a", "a/x", "a.txt", "a0", "a b", "é", "Z", StorePath(bytes: latin1), StorePath(bytes: latin1 + Array("/in".utf8)),
                  StorePath(bytes: Array("a/".utf8) + latin1), StorePath(bytes: [0xFF])]
        try index.bases.putAll(root: "store:a", paths.shuffled().map { BaseRow(path: $0, id: nil, kind: .file, localToken: "1", remoteToken: "1") })
        try index.bases.put(root: "store:b", BaseRow(path: "a/other", id: nil, kind: .file, localToken: "1", remoteToken: "1"))
        // When each form is read in order
        func all(utf8: Bool) throws -> [StorePath] {
            var cursor = BasesInOrder(index.bases, root: "store:a", utf8: utf8)
            var out = [StorePath]()
            while let b = try cursor.next() { out.append(b.path) }
            return out
        }
        // Then each comes once, in the order of its bytes
        XCTAssertEqual(try all(utf8: true), paths.filter { $0.string != nil }.sorted())
        XCTAssertEqual(try all(utf8: false), paths.filter { $0.string == nil }.sorted())
        // And taking a path passes exactly the bases before it, whether the path has one or not
        var cursor = BasesInOrder(index.bases, root: "store:a", utf8: true)
        var passed = [StorePath]()
        XCTAssertEqual(try cursor.take("a.txt", passed: { passed.append($0.path) })?.path, "a.txt")
        XCTAssertEqual(passed, ["Z", "a", "a b"])
        passed = []
        XCTAssertNil(try cursor.take("a/w", passed: { passed.append($0.path) }))
        XCTAssertEqual(passed, [])
        XCTAssertEqual(try cursor.take("f/1000", passed: { passed.append($0.path) })?.path, "f/1000")
        XCTAssertEqual(passed, ["a/x", "a0", "f/0", "f/1", "f/10", "f/100"])
    }
}
