// FileErrors: the file system's operations answer with an errno (typed throws: `Errno`, which the
// adapter replies as it is, DocDriveFUSE/Errors.swift). Where one of them meets a failure of the
// drive's other layers (a fill, the item index), the errno it answers is chosen here, once.
import SystemPackage

extension Errno {
    /// The errno a file operation answers for a failure of the drive: gone from the remote is
    /// ENOENT; no room for it on this device is ENOSPC or EDQUOT (the disk's own answer, which
    /// the user can act on); anything else is EIO (its sentence is in the log and in
    /// `docdrive status`).
    public init(answering e: DriveError) {
        if e.code == .notFound {
            self = .noSuchFileOrDirectory
        } else {
            self = e.noRoomErrno ?? .ioError
        }
    }
}
