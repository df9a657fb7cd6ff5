// MountState: what a running daemon leaves in run/ (mount.json, the drive lock) and the kernel's mount table.
import CDocDriveSys
import Foundation
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// The record a running daemon keeps in `run/mount.json`.
public struct MountRecord: Codable, Sendable, Equatable {
    public var pid: Int32
    public var mountpoint: String
    public var started: Double
    public var options: String
    /// How open files are read and written: "passthrough" (the kernel uses the backing files
    /// itself) or "daemon" (every read and write goes through the drive). Nil in records
    /// written before it existed.
    public var fileIO: String?

    public init(pid: Int32, mountpoint: String, started: Double, options: String, fileIO: String? = nil) {
        self.pid = pid
        self.mountpoint = mountpoint
        self.started = started
        self.options = options
        self.fileIO = fileIO
    }
}

extension DriveHome {
    public func writeMountRecord(_ r: MountRecord) throws(DriveError) {
        let data = (try? JSONEncoder().encode(r)) ?? Data()
        try Self.writeAtomically(String(decoding: data, as: UTF8.self) + "\n", to: mountInfoPath, mode: 0o600)
    }

    /// The record of the daemon serving this drive, if one is alive.
    public func liveMountRecord() -> MountRecord? {
        guard let r = lastMountRecord() else { return nil }
        return processIsAlive(r.pid) ? r : nil
    }

    /// The record the last daemon left, alive or not (a killed daemon cannot remove it).
    public func lastMountRecord() -> MountRecord? {
        guard let data = FileManager.default.contents(atPath: mountInfoPath) else { return nil }
        return try? JSONDecoder().decode(MountRecord.self, from: data)
    }

    /// The record of a daemon that is gone (killed, crashed) while its mount point is still a
    /// DocDrive mount in the kernel's table: a dead mount, where every call fails with ENOTCONN
    /// until it is detached. A daemon still alive is given up to `graceMilliseconds` to die
    /// first (one that was just killed). Nil when there is no dead mount.
    public func deadMountRecord(graceMilliseconds: Int = 0) -> MountRecord? {
        guard let r = lastMountRecord(), MountTable.docdriveMount(at: r.mountpoint) != nil else { return nil }
        for _ in 0..<(graceMilliseconds / 20) where processIsAlive(r.pid) { usleep(20_000) }
        return processIsAlive(r.pid) ? nil : r
    }

    public func removeMountRecord() {
        unlink(mountInfoPath)
    }

    /// Takes the drive's lock (held by the daemon for its whole life), or says who holds it.
    public func acquireDriveLock() throws(DriveError) -> Int32 {
        try Self.makeDirectory(runPath, mode: 0o700)
        let fd = open(lockPath, O_RDWR | O_CREAT | dd_O_CLOEXEC, 0o600)
        if fd < 0 { throw DriveError.io("cannot open \(lockPath)", Errno(rawValue: errno)) }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            close(fd)
            if let r = liveMountRecord() {
                throw DriveError(.alreadyMounted, "This drive is already mounted at \(r.mountpoint) (daemon pid \(r.pid)).")
            }
            throw DriveError(.alreadyMounted, "This drive is already in use by another docdrive daemon.")
        }
        return fd
    }
}

/// True while the process runs; a zombie (exited, not yet reaped by its new parent) is not alive.
public func processIsAlive(_ pid: Int32) -> Bool {
    guard pid > 0, kill(pid, 0) == 0 || errno == EPERM else { return false }
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return true }
    let state = stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).first
    return state != "Z" && state != "X"
}

/// One line of /proc/self/mountinfo.
public struct MountEntry: Equatable, Sendable {
    public var mountpoint: String
    public var fsType: String
    public var source: String

    public init(mountpoint: String, fsType: String, source: String) {
        self.mountpoint = mountpoint
        self.fsType = fsType
        self.source = source
    }
}

public enum MountTable {
    /// Whether a call on a FUSE mount failed because its daemon is gone: ENOTCONN once the
    /// kernel has closed the connection; in the instant before (about 50 ms after the daemon's
    /// death, with FUSE over io_uring), ECANCELED (its rings went with the process) and then
    /// ECONNABORTED.
    public static func isDeadConnection(_ e: Int32) -> Bool {
        e == ENOTCONN || e == ECONNABORTED || e == ECANCELED
    }

    /// Parses mountinfo text (fields: id parent major:minor root mountpoint options ... - fstype source superopts).
    public static func parse(_ text: String) -> [MountEntry] {
        text.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
            guard parts.count > 6, let dash = parts.firstIndex(of: "-"), dash + 2 < parts.count else { return nil }
            return MountEntry(mountpoint: unescape(parts[4]), fsType: parts[dash + 1], source: unescape(parts[dash + 2]))
        }
    }

    /// mountinfo writes space, tab, newline and backslash as \ooo octal.
    static func unescape(_ s: String) -> String {
        guard s.contains("\\") else { return s }
        var out = [UInt8](), bytes = Array(s.utf8), i = 0
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "\\"), i + 4 <= bytes.count,
               let v = UInt8(String(decoding: bytes[(i + 1)..<(i + 4)], as: UTF8.self), radix: 8) {
                out.append(v)
                i += 4
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    public static func current() -> [MountEntry] {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return [] }
        return parse(text)
    }

    /// The DocDrive mount at `path`, if there is one.
    public static func docdriveMount(at path: String) -> MountEntry? {
        current().last { $0.mountpoint == path && $0.fsType == "fuse.docdrive" }
    }
}
