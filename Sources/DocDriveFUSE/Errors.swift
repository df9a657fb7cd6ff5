// Errors: the one place where anything the core throws becomes the errno a FUSE reply carries.
import CFuse
import DocDriveCore
import SystemPackage

/// Maps a core error to an errno. The core's file operations already speak errno; anything
/// else is unexpected here and becomes EIO (and is logged), as rclone's translateError does.
@inline(__always)
func errnoValue(_ error: Errno) -> Int32 {
    error.rawValue
}

@inline(__always)
func replyError(_ req: fuse_req_t?, _ error: Errno) {
    fuse_reply_err(req, errnoValue(error))
}

func replyError(_ req: fuse_req_t?, _ error: DriveError, context: FuseContext) {
    context.logger.error("\(error.message)")
    fuse_reply_err(req, Errno.ioError.rawValue)
}
