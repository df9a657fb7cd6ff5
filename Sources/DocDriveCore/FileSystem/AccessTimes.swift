// AccessTimes: how reads through the mount move access times (the mount options noatime,
// nodiratime, relatime, strictatime). FUSE leaves atime to the daemon: what a stat shows is the
// backing file's atime, which the backing file system moves on the daemon's reads and on reads
// passed through to it, as its own mount says.
import Glibc

public struct AccessTimes: Sendable, Equatable {
    /// Reads of files move no access time: backing files are opened with O_NOATIME.
    public var filesKept = false
    /// Listings of folders move no access time: backing folders are listed with O_NOATIME.
    public var foldersKept = false
    /// strictatime: every read moves it (the backing file system must do so itself).
    public var strict = false

    public init() {}

    /// The options that are the mount's access-time settings, in the order given: the last of
    /// noatime, atime, relatime, norelatime, strictatime, nostrictatime decides; nodiratime and
    /// diratime are on their own.
    public static let optionNames: Set<String> = ["noatime", "atime", "relatime", "norelatime", "strictatime",
                                                  "nostrictatime", "nodiratime", "diratime"]

    public init(mountOptions: [String]) {
        for o in mountOptions {
            switch o {
            case "noatime": filesKept = true; strict = false
            case "atime", "relatime", "norelatime", "nostrictatime": filesKept = false; strict = false
            case "strictatime": filesKept = false; strict = true
            case "nodiratime": foldersKept = true
            case "diratime": foldersKept = false
            default: break
            }
        }
        if filesKept { foldersKept = true }
    }

    /// Why `strictatime` cannot be honoured with the drive home at `home` (nil: it can): every
    /// read would have to move the backing file's atime, which only its own file system does
    /// without moving ctime too.
    public static func strictProblem(home: String) -> String? {
        var v = statvfs()
        guard statvfs(home, &v) == 0 else { return nil }
        let flags = UInt(v.f_flag)
        let mode = flags & 1024 != 0 ? "noatime" : flags & 4096 != 0 ? "relatime" : nil  // ST_NOATIME, ST_RELATIME
        guard let mode else { return nil }
        return "The mount option strictatime needs the drive home on a file system mounted with strictatime, and \(home) is on one mounted \(mode): the drive shows its backing files' access times."
    }
}
