// PlaceholderMarkTests: what a placeholder's mark says (Sync/Placeholder.swift): a remote
// version, or "filled in boot B", which is a whole file in boot B and a placeholder after a
// reboot (FillCommits.swift).
import Crypto
import DocDriveCore
import Foundation
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

    /// A file filled before a crash is kept when its bytes have the MD5 its version says.
    func testContentIsCheckedAgainstAnMD5VersionOnly() throws {
        let path = NSTemporaryDirectory() + "/dd-contentis-\(getpid())"
        defer { unlink(path) }
        // 2.5 MiB: more than one read of the check's buffer.
        let data = (0..<(5 << 19)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        FileManager.default.createFile(atPath: path, contents: Data(data))
        let fd = open(path, O_RDONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let md5 = Insecure.MD5.hash(data: Data(data)).map { String(format: "%02x", $0) }.joined()
        XCTAssertTrue(Placeholder.contentIs(md5, fd: fd, size: Int64(data.count)))
        XCTAssertTrue(Placeholder.contentIs(md5.uppercased(), fd: fd, size: Int64(data.count)))
        // Another size (a file cut short), another MD5, a multipart ETag, a folder remote's version.
        XCTAssertFalse(Placeholder.contentIs(md5, fd: fd, size: Int64(data.count + 1)))
        XCTAssertFalse(Placeholder.contentIs(String(md5.reversed()), fd: fd, size: Int64(data.count)))
        XCTAssertFalse(Placeholder.contentIs(md5 + "-3", fd: fd, size: Int64(data.count)))
        XCTAssertFalse(Placeholder.contentIs("2621440:1700000000.5:77", fd: fd, size: Int64(data.count)))
    }
}
