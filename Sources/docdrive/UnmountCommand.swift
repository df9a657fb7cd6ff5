// UnmountCommand: `docdrive unmount`: unmount, wait for the daemon to finish, or say what holds the mount.
import ArgumentParser
import DocDriveCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct Unmount: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Unmount the drive and wait for its daemon to finish.")

    @OptionGroup var drive: DriveOptions

    @Argument(help: "The mount point.") var mountpoint: String

    @Flag(help: "Detach now even if the mount is busy (it goes once the last user lets go).")
    var lazy = false

    @Option(help: ArgumentHelp("Seconds to wait for the daemon to finish.", valueName: "seconds"))
    var timeout: Double = 120

    func run() throws {
        try guarded {
            let home = drive.driveHome
            let mp = DriveHome.absolute(mountpoint).replacingOccurrences(of: "//", with: "/")
            let path = mp.count > 1 && mp.hasSuffix("/") ? String(mp.dropLast()) : mp
            guard MountTable.docdriveMount(at: path) != nil else {
                throw DriveError(.notMounted, "\(path) is not a DocDrive mount.")
            }
            // Only this drive's mount: another drive mounted there is not ours to take down.
            // The record holds the resolved mount point; the one given may go through a symlink.
            let resolved = realpath(path, nil).map { r in defer { free(r) }; return String(cString: r) } ?? path
            guard let last = home.lastMountRecord(), last.mountpoint == path || last.mountpoint == resolved,
                  processIsAlive(last.pid) || Self.isDeadMount(path) else {
                throw DriveError(.notMounted, "\(path) is the mount of another drive, not of the drive at \(home.path); set DOCDRIVE_HOME (or --home) to that drive's home to unmount it.")
            }
            let record = processIsAlive(last.pid) ? last : nil
            let (ok, message) = Self.fusermount(path, lazy: lazy)
            if !ok {
                if message.contains("busy") {
                    throw DriveError(.busy, "\(path) is busy: \(Self.holders(path)). Close them and try again, or use --lazy.")
                }
                throw DriveError(.mount, "Cannot unmount \(path): \(message.isEmpty ? "fusermount3 failed" : message).")
            }
            guard let record else {
                print("Unmounted \(path).")
                return
            }
            let deadline = Date().addingTimeInterval(timeout)
            var told = false
            while processIsAlive(record.pid) {
                if Date() > deadline {
                    throw DriveError(.busy, "Unmounted \(path), but its daemon (pid \(record.pid)) is still finishing after \(Int(timeout)) s; see \(home.logPath).")
                }
                if !told && Date().addingTimeInterval(-1) > deadline.addingTimeInterval(-timeout) {
                    warn("Waiting for the daemon (pid \(record.pid)) to finish its work...")
                    told = true
                }
                usleep(20_000)
            }
            let left = (try? ItemIndex(readingOnly: home.indexPath).uploads.counts()).map { ($0[.pending] ?? 0) + ($0[.failed] ?? 0) } ?? 0
            print("Unmounted \(path)." + (left == 0 ? "" : " \(left) file\(left == 1 ? " is" : "s are") still to upload; that goes on at the next mount."))
        }
    }

    /// A mount whose daemon is gone answers ENOTCONN (ECANCELED or ECONNABORTED just after).
    static func isDeadMount(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) != 0 && MountTable.isDeadConnection(errno)
    }

    /// Runs fusermount3 (works for root and for the user who mounted); returns its verdict.
    static func fusermount(_ path: String, lazy: Bool) -> (Bool, String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
        if !FileManager.default.fileExists(atPath: "/bin/fusermount3") {
            p.executableURL = URL(fileURLWithPath: "/usr/bin/fusermount3")
        }
        p.arguments = [lazy ? "-uz" : "-u", path]
        let err = Pipe()
        p.standardError = err
        p.standardOutput = FileHandle.nullDevice
        do { try p.run() } catch { return (false, "fusermount3 is not installed (apt-get install fuse3)") }
        p.waitUntilExit()
        let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let reason = text.components(separatedBy: ": ").last ?? text
        return (p.terminationStatus == 0, reason)
    }

    /// "bash (pid 12), vim (pid 40)" from fuser -m, or a hint when fuser is missing.
    static func holders(_ path: String) -> String {
        var found = [String]()
        if let procs = try? FileManager.default.contentsOfDirectory(atPath: "/proc") {
            for pid in procs where Int32(pid) != nil {
                if uses(pid: pid, path: path) {
                    let comm = (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?
                        .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
                    found.append("\(comm) (pid \(pid))")
                }
            }
        }
        return found.isEmpty ? "something still uses it (try `fuser -vm \(path)`)" : "in use by " + found.joined(separator: ", ")
    }

    /// Does the process have its cwd, root or an open file under `path`?
    static func uses(pid: String, path: String) -> Bool {
        let fm = FileManager.default
        let inside = { (p: String) in p == path || p.hasPrefix(path + "/") }
        for link in ["cwd", "root"] {
            if let t = try? fm.destinationOfSymbolicLink(atPath: "/proc/\(pid)/\(link)"), inside(t) { return true }
        }
        if let fds = try? fm.contentsOfDirectory(atPath: "/proc/\(pid)/fd") {
            for fd in fds {
                if let t = try? fm.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)"), inside(t) { return true }
            }
        }
        return false
    }
}
