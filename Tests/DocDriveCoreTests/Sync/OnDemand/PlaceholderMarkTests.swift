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

    /// Marks written before the short form name their boot by its whole id: read as of an
    /// earlier boot (a placeholder of their version), whatever boot this is.
    func testAFilledMarkOfTheFirstFormIsOfAnEarlierBoot() throws {
        let id = "29e37f0f-0dbc-4f75-a0df-1b2c3d4e5f60"
        let raw = "\u{0}filled " + id + " b0059b402ea5fa209053b0ae093d0ab6"
        XCTAssertEqual(Placeholder.mark(raw: raw, boot: id), .placeholder("b0059b402ea5fa209053b0ae093d0ab6"))
        XCTAssertEqual(Placeholder.mark(raw: raw, boot: try XCTUnwrap(Placeholder.bootToken(id))),
                       .placeholder("b0059b402ea5fa209053b0ae093d0ab6"))
    }

    /// The mark of a file filled in this boot fits in an ext4 inode of 256 bytes beside
    /// nothing else (52 bytes; a block of its own for each file otherwise): for an S3 object's
    /// MD5, a multipart ETag, and a folder remote's version of a file of 1 MiB.
    func testAFilledMarkIsShortAndNamesItsBootByAToken() throws {
        let token = try XCTUnwrap(Placeholder.bootToken("29e37f0f-0dbc-4f75-a0df-1b2c3d4e5f60"))
        XCTAssertEqual(token.utf8.count, 8)
        XCTAssertTrue(token.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }, token)
        XCTAssertNotEqual(token, Placeholder.bootToken("29e37f0f-0dbc-4f75-a0df-1b2c3d4e5f61"))
        XCTAssertNil(Placeholder.bootToken(""))
        for version in ["b0059b402ea5fa209053b0ae093d0ab6", "b0059b402ea5fa209053b0ae093d0ab6-1000",
                        "1048576:1795886453.204199600:1234567890"] {
            let raw = Placeholder.filledPrefix + token + " " + version
            XCTAssertLessThanOrEqual(raw.utf8.count, 52, raw)
            XCTAssertEqual(Placeholder.mark(raw: raw, boot: token), .filled(version))
        }
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
