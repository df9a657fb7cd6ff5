// SyncDecisionTests: every case of the sync decision (local, base, remote), as one table.
import DocDriveCore
import Foundation
import XCTest

final class SyncDecisionTests: XCTestCase {
    // Versions of one document: `l*` local tokens, `r*` remote tokens; hashes name contents.
    static let base = SyncBase(path: "doc.odt", localToken: "l1", remoteToken: "r1")
    /// The base of a version `r1` written over `r0`.
    static let sibling = SyncBase(path: "doc.odt", localToken: "l1", remoteToken: "r1", parent: "r0")
    static func local(_ token: String, _ path: String = "doc.odt", hash: String? = nil, kind: SyncEntry.Kind = .file) -> SyncEntry {
        SyncEntry(path: path, kind: kind, token: token, hash: hash)
    }
    static func remote(_ token: String, _ path: String = "doc.odt", hash: String? = nil, kind: SyncEntry.Kind = .file) -> SyncEntry {
        SyncEntry(path: path, kind: kind, token: token, hash: hash)
    }
    static let folderBase = SyncBase(path: "Reports", kind: .folder, localToken: "", remoteToken: "")
    static let folder = SyncEntry(path: "Reports", kind: .folder, token: "")

    struct Case {
        let name: String
        let item: SyncItem
        let want: SyncPlan
    }

    static let cases: [Case] = [
        // Nothing changed.
        Case(name: "unchanged on both", item: SyncItem(local: local("l1"), base: base, remote: remote("r1")), want: SyncPlan(.none)),
        // One side changed.
        Case(name: "changed here", item: SyncItem(local: local("l2"), base: base, remote: remote("r1")), want: SyncPlan(.upload)),
        Case(name: "changed there", item: SyncItem(local: local("l1"), base: base, remote: remote("r2")), want: SyncPlan(.download)),
        Case(name: "changed there, busy here (dirty, open or locked)",
             item: SyncItem(local: local("l1"), base: base, remote: remote("r2"), localBusy: true), want: SyncPlan(.conflict)),
        Case(name: "deleted here", item: SyncItem(local: nil, base: base, remote: remote("r1")), want: SyncPlan(.deleteRemote)),
        Case(name: "deleted there", item: SyncItem(local: local("l1"), base: base, remote: nil), want: SyncPlan(.deleteLocal)),
        Case(name: "deleted there, busy here", item: SyncItem(local: local("l1"), base: base, remote: nil, localBusy: true),
             want: SyncPlan(.upload)),
        // Changed there by a write over the version before the base's (`r0`): two writes
        // conditional on one version both succeeded, the base's version was replaced unseen.
        Case(name: "changed there over the version before the base's (a race both writes won)",
             item: SyncItem(local: local("l1"), base: sibling, remote: SyncEntry(path: "doc.odt", token: "r2", parent: "r0")),
             want: SyncPlan(.conflict)),
        Case(name: "changed there over the base's version",
             item: SyncItem(local: local("l1"), base: sibling, remote: SyncEntry(path: "doc.odt", token: "r2", parent: "r1")),
             want: SyncPlan(.download)),
        Case(name: "changed there twice since the base (a version in between)",
             item: SyncItem(local: local("l1"), base: sibling, remote: SyncEntry(path: "doc.odt", token: "r3", parent: "r2")),
             want: SyncPlan(.download)),
        Case(name: "changed there, the parent unknown (another tool's write)",
             item: SyncItem(local: local("l1"), base: sibling, remote: remote("r2")), want: SyncPlan(.download)),
        Case(name: "made again there after a delete, like the base's version (creates are not compared)",
             item: SyncItem(local: local("l1"), base: SyncBase(path: "doc.odt", localToken: "l1", remoteToken: "r1", parent: RemoteMeta.created),
                            remote: SyncEntry(path: "doc.odt", token: "r2", parent: RemoteMeta.created)),
             want: SyncPlan(.download)),
        Case(name: "another create there in place of this device's own create that no listing showed (a race both creates won)",
             item: SyncItem(local: local("l1"), base: SyncBase(path: "doc.odt", localToken: "l1", remoteToken: "r1", parent: RemoteMeta.created,
                                                              unlistedCreate: true),
                            remote: SyncEntry(path: "doc.odt", token: "r2", parent: RemoteMeta.created)),
             want: SyncPlan(.conflict)),
        Case(name: "a replacing write there over this device's own create that no listing showed (its writer saw it)",
             item: SyncItem(local: local("l1"), base: SyncBase(path: "doc.odt", localToken: "l1", remoteToken: "r1", parent: RemoteMeta.created,
                                                              unlistedCreate: true),
                            remote: SyncEntry(path: "doc.odt", token: "r2", parent: "r1")),
             want: SyncPlan(.download)),
        Case(name: "another create there in place of this device's own create that no listing showed, a placeholder here",
             item: SyncItem(local: local("l1"), base: SyncBase(path: "doc.odt", localToken: "l1", remoteToken: "r1", parent: RemoteMeta.created,
                                                              unlistedCreate: true),
                            remote: SyncEntry(path: "doc.odt", token: "r2", parent: RemoteMeta.created), localIsPlaceholder: true),
             want: SyncPlan(.download)),
        Case(name: "changed there over r0, where the base's write kept r0's ETag (the same bytes saved again)",
             item: SyncItem(local: local("l1"), base: SyncBase(path: "doc.odt", localToken: "l1", remoteToken: "r0", parent: "r0"),
                            remote: SyncEntry(path: "doc.odt", token: "r2", parent: "r0")),
             want: SyncPlan(.download)),
        Case(name: "a race both writes won, a placeholder here (nothing to keep)",
             item: SyncItem(local: local("l1"), base: sibling, remote: SyncEntry(path: "doc.odt", token: "r2", parent: "r0"),
                            localIsPlaceholder: true),
             want: SyncPlan(.download)),
        // Both changed.
        Case(name: "changed on both", item: SyncItem(local: local("l2"), base: base, remote: remote("r2")), want: SyncPlan(.conflict)),
        Case(name: "changed on both to the same content",
             item: SyncItem(local: local("l2", hash: "h2"), base: base, remote: remote("r2", hash: "h2")), want: SyncPlan(.adopt)),
        Case(name: "deleted on both", item: SyncItem(local: nil, base: base, remote: nil), want: SyncPlan(.forget)),
        Case(name: "changed here, deleted there: the change wins",
             item: SyncItem(local: local("l2"), base: base, remote: nil), want: SyncPlan(.upload)),
        Case(name: "deleted here, changed there: the change wins",
             item: SyncItem(local: nil, base: base, remote: remote("r2")), want: SyncPlan(.download)),
        // New on one side, or on both.
        Case(name: "created here", item: SyncItem(local: local("l1"), base: nil, remote: nil), want: SyncPlan(.upload)),
        Case(name: "created there", item: SyncItem(local: nil, base: nil, remote: remote("r1")), want: SyncPlan(.download)),
        Case(name: "created on both under one name, different content",
             item: SyncItem(local: local("l1", hash: "a"), base: nil, remote: remote("r1", hash: "b")), want: SyncPlan(.conflict)),
        Case(name: "created on both under one name, content unknown",
             item: SyncItem(local: local("l1"), base: nil, remote: remote("r1")), want: SyncPlan(.conflict)),
        Case(name: "created on both under one name, same content",
             item: SyncItem(local: local("l1", hash: "a"), base: nil, remote: remote("r1", hash: "a")), want: SyncPlan(.adopt)),
        Case(name: "a folder created on both", item: SyncItem(local: folder, base: nil, remote: folder), want: SyncPlan(.adopt)),
        Case(name: "a file here, a folder there, same name",
             item: SyncItem(local: local("l1"), base: nil, remote: folder), want: SyncPlan(.conflict)),
        // Renames (matched by item id).
        Case(name: "renamed here", item: SyncItem(local: local("l1", "new.odt"), base: base, remote: remote("r1")),
             want: SyncPlan(.none, move: .remote(to: "new.odt"))),
        Case(name: "renamed there", item: SyncItem(local: local("l1"), base: base, remote: remote("r1", "new.odt")),
             want: SyncPlan(.none, move: .local(to: "new.odt"))),
        Case(name: "renamed there, changed here", item: SyncItem(local: local("l2"), base: base, remote: remote("r1", "new.odt")),
             want: SyncPlan(.upload, move: .local(to: "new.odt"))),
        Case(name: "renamed here, changed there", item: SyncItem(local: local("l1", "new.odt"), base: base, remote: remote("r2")),
             want: SyncPlan(.download, move: .remote(to: "new.odt"))),
        Case(name: "renamed on both to different names: the remote's name wins",
             item: SyncItem(local: local("l1", "mine.odt"), base: base, remote: remote("r1", "theirs.odt")),
             want: SyncPlan(.none, move: .local(to: "theirs.odt"))),
        Case(name: "renamed on both to the same name", item: SyncItem(local: local("l1", "same.odt"), base: base, remote: remote("r1", "same.odt")),
             want: SyncPlan(.none)),
        Case(name: "renamed and changed on both",
             item: SyncItem(local: local("l2", "mine.odt"), base: base, remote: remote("r2", "theirs.odt")),
             want: SyncPlan(.conflict, move: .local(to: "theirs.odt"))),
        Case(name: "renamed there, deleted here: the delete goes there",
             item: SyncItem(local: nil, base: base, remote: remote("r1", "new.odt")), want: SyncPlan(.deleteRemote)),
        // Folders: a delete on one side against something new inside on the other.
        Case(name: "folder deleted there with a new file inside here",
             item: SyncItem(local: folder, base: folderBase, remote: nil, changedInsideLocally: true), want: SyncPlan(.upload)),
        Case(name: "folder deleted here with a new file inside there",
             item: SyncItem(local: nil, base: folderBase, remote: folder, changedInsideRemotely: true), want: SyncPlan(.download)),
        Case(name: "folder deleted there, nothing new here", item: SyncItem(local: folder, base: folderBase, remote: nil),
             want: SyncPlan(.deleteLocal)),
        Case(name: "folder deleted here, nothing new there", item: SyncItem(local: nil, base: folderBase, remote: folder),
             want: SyncPlan(.deleteRemote)),
        Case(name: "a file replaced by a folder here", item: SyncItem(local: local("", kind: .folder), base: base, remote: remote("r1")),
             want: SyncPlan(.upload)),
    ]

    func testEveryCase() {
        for c in Self.cases {
            XCTAssertEqual(SyncDecision.decide(c.item), c.want, c.name)
        }
    }

    /// Whatever the inputs, the plan never loses a version this device has not uploaded: a
    /// changed local copy is never deleted or downloaded over, and a remote version this device
    /// has not seen is never deleted or overwritten without a conflict copy.
    func testNoPlanLosesAVersion() {
        let tokens = ["l1", "l2"], rtokens = ["r1", "r2"]
        var checked = 0
        for l in [nil] + tokens.map({ Optional(Self.local($0)) }) {
            for r in [nil] + rtokens.map({ Optional(Self.remote($0)) }) {
                for b in [nil, Self.base] {
                    for busy in [false, true] {
                        let plan = SyncDecision.decide(SyncItem(local: l, base: b, remote: r, localBusy: busy))
                        let localChanged = l != nil && (b == nil || l!.token != b!.localToken)
                        let remoteUnseen = r != nil && (b == nil || r!.token != b!.remoteToken)
                        if localChanged || (busy && l != nil) {
                            XCTAssertFalse([.deleteLocal, .download].contains(plan.action), "\(String(describing: l)) \(String(describing: b)) \(String(describing: r)) busy \(busy): \(plan)")
                        }
                        if remoteUnseen {
                            XCTAssertFalse([.deleteRemote, .upload].contains(plan.action), "\(String(describing: l)) \(String(describing: b)) \(String(describing: r)) busy \(busy): \(plan)")
                        }
                        checked += 1
                    }
                }
            }
        }
        XCTAssertEqual(checked, 36)
    }

    func testConflictNames() {
        let date = Date(timeIntervalSince1970: 1_795_000_000)  // 2026-11-18 11.06.40 UTC
        XCTAssertEqual(SyncDecision.conflictPath("Reports/q3.odt", device: "laptop", date: date),
                       "Reports/q3 (conflict from laptop 2026-11-18 11.06.40).odt")
        XCTAssertEqual(SyncDecision.conflictPath("notes", device: "a/b", date: date), "notes (conflict from a_b 2026-11-18 11.06.40)")
        XCTAssertEqual(SyncDecision.conflictPath(".bashrc", device: "pc", date: date), ".bashrc (conflict from pc 2026-11-18 11.06.40)")
        XCTAssertEqual(SyncDecision.conflictPath("a.tar.gz", device: "pc", date: date), "a.tar (conflict from pc 2026-11-18 11.06.40).gz")
        let long = String(repeating: "x", count: 250) + ".txt"
        let name = SyncDecision.conflictPath(long, device: "pc", date: date)
        XCTAssertLessThanOrEqual(name.utf8.count, 255)
        XCTAssertTrue(name.hasSuffix(" (conflict from pc 2026-11-18 11.06.40).txt"))
        // And back: the document a copy was made from.
        for p in ["Reports/q3.odt", "notes", ".bashrc", "a.tar.gz", "x (conflict from y).txt"] {
            XCTAssertEqual(SyncDecision.originalOfConflictCopy(SyncDecision.conflictPath(p, device: "my pc (2)", date: date)), p)
        }
        XCTAssertNil(SyncDecision.originalOfConflictCopy("Reports/q3.odt"))
        XCTAssertNil(SyncDecision.originalOfConflictCopy("q3 (conflict from nobody).odt"))
        // and the device whose version it holds (not the one that uploaded the copy), without
        // the number of a second copy in the same second.
        XCTAssertEqual(SyncDecision.conflictCopy(SyncDecision.conflictPath("Reports/q3.odt", device: "my pc (2)", date: date))?.device, "my pc (2)")
        XCTAssertEqual(SyncDecision.conflictCopy(SyncDecision.conflictPath("notes.txt", device: "laptop-A 2", date: date))?.device, "laptop-A")
        XCTAssertEqual(SyncDecision.conflictCopy("notes (conflict from laptop-B 2026-11-26 01.29.50).txt")?.original, "notes.txt")
    }
}
