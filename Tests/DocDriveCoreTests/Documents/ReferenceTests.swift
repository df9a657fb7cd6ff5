// ReferenceTests: reserved names, paths from outside, free names, reference tokens, and what
// the index keeps for references (ids through save-by-rename, moves, grants, import copies).
import DocDriveCore
import Foundation
import XCTest

final class ReferenceTests: XCTestCase {
    var dir: String!

    override func setUp() {
        dir = NSTemporaryDirectory() + "dd-ref-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: dir)
    }

    func testReservedNames() {
        XCTAssertTrue(ReservedNames.isReserved("a.odt.docdrive-ref"))
        XCTAssertTrue(ReservedNames.isReserved(".docdrive-ref"))
        XCTAssertFalse(ReservedNames.isReserved("a.docdrive-ref.txt"))
        XCTAssertFalse(ReservedNames.isReserved("docdrive-ref"))
        "x.docdrive-ref".withCString { XCTAssertTrue(ReservedNames.isReserved($0)) }
        "x.docdrive-re".withCString { XCTAssertFalse(ReservedNames.isReserved($0)) }
    }

    func testRelativePathsFromOutside() {
        XCTAssertNil(Names.problem(withRelativePath: "a/b/c.txt"))
        for bad in ["", "/etc/passwd", "a/../b", "..", "a//b", "a/./b", "a/", String(repeating: "x", count: 256)] {
            XCTAssertNotNil(Names.problem(withRelativePath: bad), bad)
        }
    }

    func testFreeNamesFollowTheFindersWay() {
        XCTAssertEqual(Array(DocumentService.candidates("report.odt").prefix(3)), ["report.odt", "report 2.odt", "report 3.odt"])
        XCTAssertEqual(Array(DocumentService.candidates("README").prefix(2)), ["README", "README 2"])
        XCTAssertEqual(Array(DocumentService.candidates(".bashrc").prefix(2)), [".bashrc", ".bashrc 2"])
        XCTAssertEqual(Array(DocumentService.candidates("a.tar.gz").prefix(2)), ["a.tar.gz", "a.tar 2.gz"])
    }

    func testReferenceTokensOpenOnlyAsReferencesAndOnlyUnaltered() throws {
        let key = DriveKey(bytes: (0..<32).map { UInt8($0) })
        let p = ReferencePayload(app: "org.x", store: "work", item: "id-1", hint: "a/b.txt", handle: "", created: 1)
        let text = ReferenceLink.encode(p, key: key)
        XCTAssertTrue(text.hasSuffix("\n"))
        let token = String(text.dropLast())
        XCTAssertEqual(try SignedToken.open(token, as: ReferencePayload.self, purpose: .reference, key: key), p)
        XCTAssertThrowsError(try SignedToken.open(token, as: ReferencePayload.self, purpose: .bookmark, key: key))
        XCTAssertThrowsError(try SignedToken.open(token, as: ReferencePayload.self, purpose: .reference,
                                                  key: DriveKey(bytes: [UInt8](repeating: 7, count: 32))))
        var rng = SystemRandomNumberGenerator()
        let chars = Array(token)
        for _ in 0..<2000 {
            var m = chars
            let i = Int.random(in: 0..<m.count, using: &rng)
            let c = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.").randomElement(using: &rng)!
            if m[i] == c { continue }
            m[i] = c
            XCTAssertThrowsError(try SignedToken.open(String(m), as: ReferencePayload.self, purpose: .reference, key: key))
        }
    }

    func testSaveByRenameKeepsTheDocumentsId() throws {
        let index = try ItemIndex(path: dir + "/i.sqlite")
        let id = try index.itemID(root: "store:w", ino: 10, parentIno: 2, name: "doc.txt", kind: .file)
        index.record(.created(root: "store:w", ino: 11, parentIno: 2, name: ".doc.txt.swp", kind: .file))
        index.record(.renamed(root: "store:w", ino: 11, parentIno: 2, name: "doc.txt"))
        index.record(.replaced(root: "store:w", ino: 11, oldIno: 10, parentIno: 2, name: "doc.txt"))
        XCTAssertEqual(try index.knownItemID(root: "store:w", ino: 11), id)
        XCTAssertNil(try index.knownItemID(root: "store:w", ino: 10))
        XCTAssertEqual(try index.knownPath(id: id, root: "store:w", rootIno: 2), "doc.txt")
    }

    func testKnownPathWalksParentsAndStopsAtUnknownFolders() throws {
        let index = try ItemIndex(path: dir + "/i.sqlite")
        index.record(.created(root: "store:w", ino: 20, parentIno: 2, name: "sub", kind: .directory))
        index.record(.created(root: "store:w", ino: 21, parentIno: 20, name: "a.txt", kind: .file))
        index.record(.created(root: "store:w", ino: 31, parentIno: 30, name: "lost.txt", kind: .file))
        let a = try XCTUnwrap(try index.knownItemID(root: "store:w", ino: 21))
        let lost = try XCTUnwrap(try index.knownItemID(root: "store:w", ino: 31))
        XCTAssertEqual(try index.knownPath(id: a, root: "store:w", rootIno: 2), "sub/a.txt")
        XCTAssertNil(try index.knownPath(id: lost, root: "store:w", rootIno: 2))
    }

    func testMovedItemsKeepTheirIdAndGrantsAndImportsAreKept() throws {
        let index = try ItemIndex(path: dir + "/i.sqlite")
        let id = try index.itemID(root: "app:x:Documents", ino: 5, parentIno: 1, name: "d.txt", kind: .file)
        try index.moveItem(id: id, toRoot: "store:w", ino: 5, parentIno: 2, name: "d.txt")
        XCTAssertEqual(try index.knownItemID(root: "store:w", ino: 5), id)
        XCTAssertNil(try index.knownItemID(root: "app:x:Documents", ino: 5))
        try index.addGrant(Grant(app: "x", root: "store:w", item: id, path: "d.txt", created: 1))
        XCTAssertEqual(try index.grants(app: "x").map(\.item), [id])
        XCTAssertTrue(try index.removeGrant(app: "x", root: "store:w", item: id))
        XCTAssertFalse(try index.removeGrant(app: "x", root: "store:w", item: id))
        try index.addImport(app: "x", name: "a.txt")
        XCTAssertEqual(try index.imports(app: "x").map(\.name), ["a.txt"])
        try index.removeImport(app: "x", name: "a.txt")
        XCTAssertTrue(try index.imports().isEmpty)
    }
}
