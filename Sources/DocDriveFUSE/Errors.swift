// Errors: the one place where anything the core throws becomes the errno a FUSE reply carries.
import CFuse
import DocDriveCore
import SystemPackage

/// Maps a core error to an errno. The core's file operations throw `Errno` only (typed
/// throws: the compiler sees to it), so the map is the identity; it stays the one place a
/// reply's errno is chosen.
@inline(__always)
func errnoValue(_ error: Errno) -> Int32 {
    error.rawValue
}

@inline(__always)
func replyError(_ req: fuse_req_t?, _ error: Errno) {
    fuse_reply_err(req, errnoValue(error))
}
