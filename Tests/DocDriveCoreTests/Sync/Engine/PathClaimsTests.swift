// PathClaimsTests: the paths a store's workers hold and the folders they make (Sync/Engine/PathClaims.swift).
import DocDriveCore
import XCTest

final class PathClaimsTests: XCTestCase {
    /// A path overlaps itself, the folders above it (the store above all) and what is in it;
    /// not a sibling whose name begins the same.
    func testAClaimOfAnOverlappingPathIsRefused() {
        let c = PathClaims()
        XCTAssertTrue(c.claim(["a/b"]))
        XCTAssertFalse(c.claim(["a/b"]), "the same path")
        XCTAssertFalse(c.claim(["a"]), "a folder above it")
        XCTAssertFalse(c.claim(["a/b/c"]), "a path in it")
        XCTAssertFalse(c.claim([.store]), "the store itself")
        XCTAssertTrue(c.claim(["a/bc"]), "a sibling whose name begins the same")
        XCTAssertTrue(c.claim(["a/c"]))
        XCTAssertNil(c.broken)
        c.release(["a/b"])
        XCTAssertTrue(c.claim(["a/b/c"]), "free once released")
        XCTAssertFalse(c.isHeld("a/b"))
        XCTAssertTrue(c.isHeld("a/b/c"))
    }

    /// A claim of several paths is all or nothing: refused whole when one of them overlaps a
    /// held path, or another path of the same claim.
    func testAClaimOfSeveralPathsIsAllOrNothing() {
        let c = PathClaims()
        XCTAssertTrue(c.claim(["x"]))
        XCTAssertFalse(c.claim(["y", "x/1"]))
        XCTAssertFalse(c.isHeld("y"), "nothing of a refused claim is held")
        XCTAssertFalse(c.claim(["z", "z/1"]), "two paths of one claim overlap")
        XCTAssertFalse(c.isHeld("z"))
        XCTAssertTrue(c.claim(["y", "z"]))
        c.release(["x", "y", "z", "never-held"])
        XCTAssertTrue(c.claim([.store]), "nothing held: even the whole store")
        XCTAssertNil(c.broken)
    }

    /// One worker makes a folder on the remote; another asking meanwhile is told to wait.
    func testAFolderIsMadeByOneWorkerAtATime() {
        let c = PathClaims()
        XCTAssertTrue(c.startMaking("docs"))
        XCTAssertFalse(c.startMaking("docs"))
        XCTAssertTrue(c.isMaking("docs"))
        XCTAssertTrue(c.startMaking("docs/sub"), "another folder")
        c.doneMaking("docs")
        XCTAssertFalse(c.isMaking("docs"))
        XCTAssertTrue(c.startMaking("docs"))
        XCTAssertNil(c.broken)
    }

    /// Each rule, broken on purpose, is named by `broken`.
    func testEachBrokenRuleIsNamed() {
        var s = PathClaims.State()
        s.held = ["a", "b/c"]
        XCTAssertNil(s.broken)
        s.held = ["a", "b", "a"]
        XCTAssertEqual(s.broken, "PathClaims: a is held twice")
        s.held = ["b", "a/x/y", "a"]
        XCTAssertEqual(s.broken, "PathClaims: a/x/y is held while a is held too (held paths overlap)")
        s.held = ["q", .store]
        XCTAssertEqual(s.broken, "PathClaims: q is held while the store is held too (held paths overlap)")
        s.held = ["a-", "a/b"]  // "a-" sorts between "a" and "a/b": not above it
        XCTAssertNil(s.broken)
        s.making = [.store]
        XCTAssertEqual(s.broken, "PathClaims: the store itself is a folder being made")
    }
}
