// FileErrorsTests: the errno a file operation answers for a failure of the drive
// (FileSystem/FileErrors.swift).
import DocDriveCore
import SystemPackage
import XCTest

final class FileErrorsTests: XCTestCase {
    func testGoneNoRoomAndTheRest() {
        // A file gone from the remote while it was filled: ENOENT
        XCTAssertEqual(Errno(answering: DriveError(.notFound, "gone")), .noSuchFileOrDirectory)
        // No room for it on this device, from the remote's write of the download or from the drive: the disk's own answer
        XCTAssertEqual(Errno(answering: DriveError(RemoteError.io("cannot write the download", .noSpace))), .noSpace)
        XCTAssertEqual(Errno(answering: DriveError.io("cannot write", .diskQuotaExceeded)), .diskQuotaExceeded)
        // Anything else: EIO, whatever errno is underneath
        XCTAssertEqual(Errno(answering: DriveError(.unreachable, "the remote is down")), .ioError)
        XCTAssertEqual(Errno(answering: DriveError.io("cannot read", .permissionDenied)), .ioError)
        XCTAssertEqual(Errno(answering: DriveError(.index, "the index is locked")), .ioError)
    }
}
