// MountTableTests: reading /proc/self/mountinfo lines.
import DocDriveCore
import XCTest

final class MountTableTests: XCTestCase {
    func testParsesFuseMountWithEscapedSpaces() {
        let text = """
        22 1 0:21 / /proc rw,nosuid - proc proc rw
        95 22 0:45 / /home/u/My\\040Drive rw,nosuid,nodev,relatime shared:1 - fuse.docdrive docdrive rw,user_id=0
        """
        let e = MountTable.parse(text)
        XCTAssertEqual(e.count, 2)
        XCTAssertEqual(e[1], MountEntry(mountpoint: "/home/u/My Drive", fsType: "fuse.docdrive", source: "docdrive"))
        XCTAssertEqual(e[0].fsType, "proc")
    }

    func testIgnoresMalformedLines() {
        XCTAssertEqual(MountTable.parse("garbage\n\n1 2 3\n"), [])
    }

    func testADeadMountNeedsARecordWhoseMountPointIsADocDriveMount() throws {
        let home = DriveHome(path: NSTemporaryDirectory() + "dd-mounttable-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: home.runPath, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: home.path) }
        XCTAssertNil(home.deadMountRecord(), "no record")
        // A daemon that is gone, on a folder that is no mount (or no DocDrive's): nothing to clear.
        try home.writeMountRecord(MountRecord(pid: Int32.max, mountpoint: home.path, started: 0, options: ""))
        XCTAssertNil(home.deadMountRecord(graceMilliseconds: 40))
        try home.writeMountRecord(MountRecord(pid: Int32.max, mountpoint: "/", started: 0, options: ""))
        XCTAssertNil(home.deadMountRecord())
    }

    func testTheErrorsOfAMountWhoseDaemonJustDiedAllMeanADeadMount() {
        // ENOTCONN once the kernel closed the connection; with FUSE over io_uring, ECANCELED and
        // ECONNABORTED in the 50 ms before (Tests/mount/test_lifecycle.py prints those it saw).
        for e in [ENOTCONN, ECONNABORTED, ECANCELED] { XCTAssertTrue(MountTable.isDeadConnection(e), "\(e)") }
        for e in [ENOENT, EACCES, EIO, ESTALE, EINTR] { XCTAssertFalse(MountTable.isDeadConnection(e), "\(e)") }
    }
}
