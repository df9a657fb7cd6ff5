// FileStateTests: the state a store file shows (FileState.ofStoreFile), as a table: every
// combination of what the drive knows, against the rule written at the declaration.
import DocDriveCore
import XCTest

final class FileStateTests: XCTestCase {
    func testEveryCombinationFollowsTheRuleInItsOrder() {
        let queued: [UploadState?] = [nil, .pending, .uploading, .synced, .failed]
        var seen = Set<FileState>()
        for filling in [false, true] {
            for conflict in [false, true] {
                for noted in [false, true] {
                    for q in queued {
                        for unrecorded in [false, true] {
                            for placeholder in [false, true] {
                                var askedUnrecorded = false, askedPlaceholder = false
                                let s = FileState.ofStoreFile(filling: filling, inConflict: conflict, noted: noted, queued: q,
                                                              unrecorded: { askedUnrecorded = true; return unrecorded },
                                                              isPlaceholder: { askedPlaceholder = true; return placeholder })
                                seen.insert(s)
                                let what = "filling \(filling) conflict \(conflict) noted \(noted) queued \(String(describing: q)) unrecorded \(unrecorded) placeholder \(placeholder)"
                                // The rule, spelled out independently.
                                var want: FileState
                                if filling { want = .downloading } else if conflict { want = .conflict } else {
                                    if noted { want = .pending } else {
                                        switch q {
                                        case nil, .synced?: want = unrecorded ? .pending : .synced
                                        case .pending?: want = .pending
                                        case .uploading?: want = .uploading
                                        case .failed?: want = .failed
                                        }
                                    }
                                    if [.synced, .pending, .uploading].contains(want) && placeholder { want = .placeholder }
                                }
                                XCTAssertEqual(s, want, what)
                                // The questions that cost something are asked only when they decide.
                                let decidedEarly = filling || conflict
                                XCTAssertEqual(askedUnrecorded, !decidedEarly && !noted && (q == nil || q == .synced), what)
                                if decidedEarly || s == .failed { XCTAssertFalse(askedPlaceholder, what) }
                            }
                        }
                    }
                }
            }
        }
        XCTAssertEqual(seen, [.downloading, .conflict, .pending, .uploading, .synced, .failed, .placeholder])
    }

    func testAStoreIsPendingWhileAnythingOfItWaits() {
        XCTAssertEqual(FileState.ofStore(waiting: 0), .synced)
        XCTAssertEqual(FileState.ofStore(waiting: 3), .pending)
    }

    func testTheStatusSocketSaysTheSameNames() {
        // The file manager extension reads these words (Sources/docdrive/Desktop/docdrive_files.py).
        XCTAssertEqual(FileState.allCases.map(\.rawValue),
                       ["synced", "pending", "uploading", "downloading", "placeholder", "conflict", "failed", "local", "none"])
        XCTAssertEqual(StatusProtocol.statusLine("/d/f", .placeholder, pinned: true), "status\t/d/f\tplaceholder\tpinned\n")
    }
}
