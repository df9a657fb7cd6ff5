// PlaceholderMarkTests: what a placeholder's mark says (Sync/Placeholder.swift): a remote
// version, or "filled in boot B", which is a whole file in boot B and a placeholder after a
// reboot (FillCommits.swift).
import DocDriveCore
import XCTest

final class PlaceholderMarkTests: XCTestCase {
    func testAFilledMarkIsAWholeFileInItsBootAndAPlaceholderAfterAReboot() {
        let raw = Placeholder.filledPrefix + "boot-a \"etag 1\""
        XCTAssertEqual(Placeholder.mark(raw: raw, boot: "boot-a"), .filled("\"etag 1\""))
        XCTAssertEqual(Placeholder.mark(raw: raw, boot: "boot-b"), .placeholder("\"etag 1\""))
        XCTAssertEqual(Placeholder.mark(raw: raw, boot: nil), .placeholder("\"etag 1\""),
                       "without a boot id to compare, the content is not trusted")
        // A boot id that only starts like this one is another boot.
        XCTAssertEqual(Placeholder.mark(raw: raw, boot: "boot"), .placeholder("\"etag 1\""))
    }

    func testAPlainMarkIsAPlaceholderOfItsVersion() {
        XCTAssertEqual(Placeholder.mark(raw: "12:1700000000.5:77", boot: "boot-a"), .placeholder("12:1700000000.5:77"))
        // A version that happens to say "filled" is still a version: the prefix has a NUL byte.
        XCTAssertEqual(Placeholder.mark(raw: "filled boot-a v", boot: "boot-a"), .placeholder("filled boot-a v"))
        // A cut "filled" mark (no version) is a placeholder with no version the remote has:
        // its open downloads the current one.
        XCTAssertEqual(Placeholder.mark(raw: Placeholder.filledPrefix + "boot-a", boot: "boot-a"), .placeholder(""))
    }
}
