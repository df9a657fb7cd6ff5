// ListedIDsTests: what a folder holds in the last listing of a remote (Sync/ListedIDs.swift).
import DocDriveCore
import XCTest

final class ListedIDsTests: XCTestCase {
    /// What a folder holds is exactly the listed paths one name below it: not the folder itself,
    /// not deeper paths, not paths of a sibling whose name begins the same.
    func testAFolderHoldsExactlyTheListedPathsOneNameBelowIt() {
        let odd = StorePath(bytes: [UInt8(ascii: "a"), UInt8(ascii: "/"), 0xFF, 0xFE])  // not UTF-8
        var l = ListedIDs(byID: [
            "1": "a", "2": "a/x", "3": "a/y", "4": "a/y/z", "5": "ab", "6": "ab/x", "7": "a-/x",
            "8": "top.txt", "9": odd,
        ])
        XCTAssertEqual(Set(l.inFolder("a")), ["a/x", "a/y", odd])
        XCTAssertEqual(Set(l.inFolder(.store)), ["a", "ab", "top.txt"])
        XCTAssertEqual(l.inFolder("a/y"), ["a/y/z"])
        XCTAssertEqual(l.inFolder("ab"), ["ab/x"])
        XCTAssertEqual(l.inFolder("a/x"), [])
        XCTAssertEqual(l.inFolder("missing"), [])
        XCTAssertEqual(l["4"], "a/y/z")
    }

    /// Ids in the drive's own form (a lower-case UUID) are kept as 16 bytes, any other as it is;
    /// either way an id is found by exactly its string: another case or form is another id.
    func testAnIdIsFoundByExactlyItsStringWhateverItsForm() {
        let made = ItemIndex.newID()
        let upper = made.uppercased()
        let near = String(made.dropLast()) + "g"  // not hex
        let dashless = made.replacingOccurrences(of: "-", with: "")
        var l = ListedIDs(byID: [made: "a/made", upper: "a/upper", near: "b/near", dashless: "b/dashless", "x": "top"])
        XCTAssertEqual(l[made], "a/made")
        XCTAssertEqual(l[upper], "a/upper")
        XCTAssertEqual(l[near], "b/near")
        XCTAssertEqual(l[dashless], "b/dashless")
        XCTAssertEqual(l["x"], "top")
        XCTAssertNil(l[ItemIndex.newID()])
        XCTAssertEqual(Set(l.inFolder("a")), ["a/made", "a/upper"])
        XCTAssertEqual(Set(l.inFolder("b")), ["b/near", "b/dashless"])
        XCTAssertEqual(l.inFolder(.store), ["top"])
        // Only the upper-case one listed: the lower-case form is not it.
        let onlyUpper = ListedIDs(byID: [upper: "u"])
        XCTAssertNil(onlyUpper[made])
        XCTAssertEqual(onlyUpper[upper], "u")
    }

    /// A new listing replaces what the folders held with its own.
    func testANewListingReplacesWhatItsFoldersHold() {
        var l = ListedIDs(byID: ["1": "f/old"])
        XCTAssertEqual(l.inFolder("f"), ["f/old"])
        l = ListedIDs(byID: ["1": "f/new", "2": "g/x"])
        XCTAssertEqual(l.inFolder("f"), ["f/new"])
        XCTAssertEqual(l.inFolder("g"), ["g/x"])
    }

    /// Many ids (as a large store lists them): every one is found with exactly its path, an id
    /// not listed is not found, and each folder holds exactly its listed paths.
    func testEveryIdOfALargeListingIsFoundWithItsPath() {
        var byID = [String: StorePath]()
        for i in 0..<20_000 {
            let id = i % 10 == 0 ? "other-\(i)" : ItemIndex.newID()
            byID[id] = StorePath("folder \(i % 97)/file \(i) é.txt")
        }
        var l = ListedIDs(byID: byID)
        for (id, path) in byID { XCTAssertEqual(l[id], path, id) }
        for _ in 0..<1000 { XCTAssertNil(l[ItemIndex.newID()]) }
        XCTAssertNil(l["other-20000"])
        var folders = [StorePath: Set<StorePath>]()
        for path in byID.values { folders[path.folder, default: []].insert(path) }
        for (folder, held) in folders { XCTAssertEqual(Set(l.inFolder(folder)), held, "\(folder)") }
        XCTAssertEqual(l.inFolder("folder 97"), [])
    }
}
