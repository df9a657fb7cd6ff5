// StatusProtocolTests: the desktop status socket's lines: fields with tabs, newlines and
// backslashes survive escaping, requests parse, and what is not a request gets a sentence.
import DocDriveCore
import XCTest

final class StatusProtocolTests: XCTestCase {
    func testFieldsSurviveEscaping() {
        // Given fields with every character that must be escaped, and plain ones
        let fields = ["status", "/m/Work/a\tb.txt", "/m/Work/new\nline\\x", "/m/Work/ü é.odt", "", "\r"]
        // When they are written on a line and read back
        let line = StatusProtocol.line(fields)
        // Then the line is one line, and the fields are the same
        XCTAssertEqual(line.filter { $0 == "\n" }.count, 1)
        XCTAssertTrue(line.hasSuffix("\n"))
        XCTAssertEqual(StatusProtocol.fields(Substring(line.dropLast())), fields)
    }

    func testRequestsParse() {
        XCTAssertEqual(try StatusRequest.parse("status\t/m/a\t/m/b c").get(), .status(["/m/a", "/m/b c"]))
        XCTAssertEqual(try StatusRequest.parse("subscribe\t/m/Work").get(), .subscribe(["/m/Work"]))
        XCTAssertEqual(try StatusRequest.parse("unsubscribe\t/m/Work").get(), .unsubscribe(["/m/Work"]))
        XCTAssertEqual(try StatusRequest.parse("conflicts\t/m/Work/x\\ty").get(), .conflicts(["/m/Work/x\ty"]))
        XCTAssertEqual(try StatusRequest.parse("status").get(), .status([]))
    }

    func testWhatIsNotARequestGetsASentence() {
        for bad: Substring in ["stat\t/m/a", "status\trelative/path", "status\t/m/a\\q", "", "status\t/m/\\"] {
            guard case .failure(let e) = StatusRequest.parse(bad) else { return XCTFail("\(bad) parsed") }
            XCTAssertFalse(e.message.isEmpty)
        }
    }

    func testStatusLineAndGreeting() {
        XCTAssertEqual(StatusProtocol.statusLine("/m/Work/a\tb", .placeholder, pinned: true), "status\t/m/Work/a\\tb\tplaceholder\tpinned\n")
        XCTAssertEqual(StatusProtocol.statusLine("/m/Work/a", .synced, pinned: false), "status\t/m/Work/a\tsynced\t-\n")
        XCTAssertEqual(StatusProtocol.greeting(mountpoint: "/m", home: "/h"), "docdrive-status\t1\t/m\t/h\n")
        XCTAssertEqual(StatusServer.socketName(mountpoint: "/m").count, "status-".count + 12 + ".sock".count)
    }
}
