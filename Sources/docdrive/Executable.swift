// Executable: where this program (docdrive-full) and the `docdrive` command beside it are on disk.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

enum Executable {
    /// This program's file, symbolic links resolved: what the daemon is started as.
    static var fullPath: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    }

    /// The `docdrive` command users run (DocDriveFront, which execs this program for everything
    /// but plain queries), beside this program: what a systemd unit and the file manager extension
    /// run. This program itself when the command is not there.
    static var commandPath: String {
        let full = fullPath
        let command = (full as NSString).deletingLastPathComponent + "/docdrive"
        return access(command, X_OK) == 0 ? command : full
    }
}
