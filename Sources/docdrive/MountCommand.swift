// MountCommand: `docdrive mount`: start the daemon (or run it in the foreground) and wait until the mount is ready.
import ArgumentParser
import CDocDriveSys
import DocDriveCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct Mount: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mount the drive on a folder; returns once the mount is ready.")

    @OptionGroup var drive: DriveOptions

    @Argument(help: "The folder to mount on (created if missing).")
    var mountpoint: String

    @Flag(help: "Stay in the foreground and log to stderr (for systemd and debugging).")
    var foreground = false

    @Option(name: .short, help: ArgumentHelp("Mount options, comma-separated: allow_other, allow_root, default_permissions, ro, noatime, relatime (the default), strictatime, nodiratime, noexec, nosuid, nodev, dev and suid (root only), fsname=NAME (the source findmnt and df show; the drive home by default); nonempty to mount over a folder that has files (they are hidden while mounted).", valueName: "options"))
    var options: [String] = []

    @Option(help: ArgumentHelp("Seconds to wait for the mount to be ready.", valueName: "seconds"))
    var timeout: Double = 60

    @Option(help: ArgumentHelp("Seconds to keep uploading after an unmount before the daemon exits (the rest waits for the next mount).", valueName: "seconds"))
    var uploadGrace: Double = 30

    @Flag(help: "Send file reads and writes through the daemon, even where the kernel could pass them straight to the backing files (FUSE passthrough: Linux 6.9+, daemon run as root).")
    var noPassthrough = false

    @Option(help: .hidden) var readyFD: Int32?

    static let allowedOptions: Set<String> = [
        "allow_other", "allow_root", "default_permissions", "ro", "rw", "noatime", "atime", "relatime", "norelatime",
        "strictatime", "nostrictatime", "nodiratime", "diratime", "noexec", "exec", "nosuid", "suid", "nodev", "dev", "sync", "async", "dirsync", "subtype=docdrive", "nonempty",
    ]

    /// The options given, checked, with the ones DocDrive always wants added. The mount's source
    /// (`fsname=`) is the drive home unless the user names one, so that findmnt, df and the
    /// tools that tell mounts apart by their source can tell two drives apart; the type stays
    /// `fuse.docdrive`. `dev` and `suid` are off unless root asks (libfuse mounts nodev,nosuid).
    func mountOptions(home: String) throws -> String {
        var list = ["subtype=docdrive"]
        var fsname: String?
        for o in Self.splitOptions(options) where !o.isEmpty {
            if o.hasPrefix("fsname=") {
                guard o.count > 7 else { throw DriveError(.invalidConfig, "The mount option fsname= needs a name.") }
                fsname = o
                continue
            }
            guard Self.allowedOptions.contains(o) else {
                throw DriveError(.invalidConfig, "Unknown mount option \"\(o)\" (known: \((Self.allowedOptions.sorted() + ["fsname=NAME"]).joined(separator: ", "))).")
            }
            if !list.contains(o) { list.append(o) }
        }
        if AccessTimes(mountOptions: list).strict, let problem = AccessTimes.strictProblem(home: home) {
            throw DriveError(.invalidConfig, problem)
        }
        if geteuid() != 0, let o = list.first(where: { $0 == "dev" || $0 == "suid" }) {
            throw DriveError(.invalidConfig, "Only root may mount with \"\(o)\" (a user's FUSE mount is always nodev,nosuid).")
        }
        list.insert(fsname ?? "fsname=" + Self.escapeOptionValue(home), at: 0)
        // A mount shared with other users: the kernel checks permissions from the attributes
        // we report; without it a root daemon would let anyone do anything. A private mount's
        // only callers are the daemon's own user (the kernel refuses everyone else), so the
        // backing files check for us as they would natively, and the kernel is spared a folder
        // GETATTR after every create and remove in it.
        if list.contains("allow_other") && !list.contains("default_permissions") { list.append("default_permissions") }
        return list.joined(separator: ",")
    }

    /// libfuse reads `\,` as a comma inside a value and `\\` as a backslash.
    static func escapeOptionValue(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ",", with: "\\,")
    }

    /// Splits -o values at the commas that are not escaped (the daemon gets the checked list
    /// back, with the drive home's commas escaped), keeping the escapes for libfuse.
    static func splitOptions(_ values: [String]) -> [String] {
        var out = [String]()
        for v in values {
            var cur = "", escaped = false
            for c in v {
                if escaped { cur.append(c); escaped = false; continue }
                if c == "\\" { cur.append(c); escaped = true; continue }
                if c == "," { out.append(cur); cur = ""; continue }
                cur.append(c)
            }
            out.append(cur)
        }
        return out
    }

    func run() throws {
        try guarded {
            let home = drive.driveHome
            let config = try home.loadConfig()
            try home.prepareFolders(for: config)
            let opts = try mountOptions(home: home.path)
            // `nonempty` is ours (libfuse 3 mounts over anything): the daemon started below
            // hears it too, and FUSE never does.
            let list = Self.splitOptions([opts])
            let nonempty = list.contains("nonempty")
            Self.clearDeadMount(of: home)
            let mp = try Self.prepareMountpoint(mountpoint, nonempty: nonempty)
            if foreground || readyFD != nil {
                limitMallocArenas(2)
                let fuseOptions = list.filter { $0 != "nonempty" }.joined(separator: ",")
                try Daemon(home: home, config: config, mountpoint: mp, options: fuseOptions, readyFD: readyFD, uploadGrace: uploadGrace,
                           passthrough: !noPassthrough).run()
            } else {
                try startDaemon(home: home, mountpoint: mp, options: opts)
            }
        }
    }

    /// The drive's last daemon is gone (killed, crashed) but its mount is still in the table:
    /// wait a moment for a dying daemon, then detach the dead mount.
    static func clearDeadMount(of home: DriveHome) {
        if let r = home.deadMountRecord(graceMilliseconds: 200) { _ = Unmount.fusermount(r.mountpoint, lazy: true) }
    }

    /// Resolves, creates if needed and checks the folder; refuses a folder that is already a mount of ours.
    /// `nonempty`: a folder with files in it is fine (else refused: the mount would hide them).
    static func prepareMountpoint(_ raw: String, nonempty: Bool = false) throws(DriveError) -> String {
        let abs = DriveHome.absolute(raw)
        var st = stat()
        if dd_stat(abs, &st) != 0 {
            let e = errno
            if MountTable.isDeadConnection(e) {
                // A DocDrive whose daemon died (killed, crashed): clear the dead mount and go on.
                guard MountTable.docdriveMount(at: abs) != nil, Unmount.fusermount(abs, lazy: true).0 else {
                    throw DriveError(.busy, "\(abs) is a dead mount (its daemon is gone); run `fusermount3 -uz \(abs)` first.")
                }
                return try prepareMountpoint(raw, nonempty: nonempty)
            }
            if e != ENOENT { throw DriveError(.io, "Cannot use \(abs) as a mount point: \(String(cString: strerror(e))).") }
            do {
                try FileManager.default.createDirectory(atPath: abs, withIntermediateDirectories: true)
            } catch {
                throw DriveError(.io, "Cannot create the mount point \(abs): \((error as NSError).localizedDescription).")
            }
        } else if st.st_mode & S_IFMT != S_IFDIR {
            throw DriveError(.invalidConfig, "The mount point \(abs) is not a folder.")
        }
        guard let real = realpath(abs, nil) else { throw DriveError(.io, "Cannot resolve \(abs).") }
        defer { free(real) }
        let path = String(cString: real)
        if MountTable.docdriveMount(at: path) != nil {
            throw DriveError(.alreadyMounted, "A DocDrive is already mounted at \(path).")
        }
        if !nonempty, let first = firstEntry(path) {
            throw DriveError(.invalidConfig, "The mount point \(path) is not empty (it has \(first) in it): the mount would hide its files; empty it, pick another folder, or mount with -o nonempty.")
        }
        try checkUserCanMount(on: path)
        return path
    }

    /// A name in the folder, or nil when it is empty (or cannot be read: libfuse says why).
    static func firstEntry(_ path: String) -> String? {
        guard let dir = opendir(path) else { return nil }
        defer { closedir(dir) }
        while let ent = readdir(dir) {
            let name = withUnsafePointer(to: &ent.pointee.d_name) { t in
                t.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { return name }
        }
        return nil
    }

    /// What a user (not root) needs before libfuse tries: the device, and a mount point it may
    /// write to (fusermount3's rule). libfuse itself only logs its reason.
    static func checkUserCanMount(on path: String) throws(DriveError) {
        guard geteuid() != 0 else { return }
        if access("/dev/fuse", R_OK | W_OK) != 0 {
            throw DriveError(.mount, "Cannot open /dev/fuse (\(String(cString: strerror(errno)))): it must be readable and writable by users (mode 0666, as fuse3's udev rule sets it), or mount as root.")
        }
        if access(path, W_OK) != 0 {
            throw DriveError(.mount, "Cannot mount on \(path): you have no write access to it (mount on a folder of your own).")
        }
    }

    /// Starts `docdrive mount --ready-fd 3` detached, and waits for its word through a pipe.
    func startDaemon(home: DriveHome, mountpoint mp: String, options opts: String) throws {
        if let r = home.liveMountRecord() {
            throw DriveError(.alreadyMounted, "This drive is already mounted at \(r.mountpoint) (daemon pid \(r.pid)).")
        }
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw DriveError(.io, "Cannot create a pipe: \(String(cString: strerror(errno))).") }
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        let exe = Executable.fullPath
        let args = [exe, "mount", mp, "--home", home.path, "-o", opts, "--upload-grace", String(uploadGrace), "--ready-fd", "3"]
            + (noPassthrough ? ["--no-passthrough"] : [])
        var cargs: [UnsafeMutablePointer<CChar>?] = args.map { strdup($0) } + [nil]
        defer { cargs.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = dd_spawn_daemon(exe, &cargs, fds[1], fds[0], home.logPath, &pid)
        close(fds[1])
        if rc != 0 {
            close(fds[0])
            throw DriveError(.mount, "Cannot start the daemon \(exe): \(String(cString: strerror(rc))).")
        }
        let reply = Self.readReply(fds[0], timeout: timeout)
        close(fds[0])
        if reply == "ready" {
            print("Mounted the drive at \(mp) (daemon pid \(pid), log \(home.logPath)).")
            return
        }
        if reply.hasPrefix("error ") {
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            throw DriveError(.mount, String(reply.dropFirst(6)))
        }
        if reply == "timeout" {
            kill(pid, SIGTERM)
            throw DriveError(.mount, "The mount was not ready after \(Int(timeout)) s; the daemon was stopped (log: \(home.logPath)).")
        }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        throw DriveError(.mount, "The daemon exited before the mount was ready; its log is \(home.logPath).")
    }

    static func readReply(_ fd: Int32, timeout: Double) -> String {
        var data = [UInt8]()
        let deadline = Date().addingTimeInterval(timeout)
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return "timeout" }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let r = poll(&p, 1, Int32(min(left, 1) * 1000))
            if r < 0 && errno == EINTR { continue }
            if r == 0 { continue }
            let n = read(fd, &buf, buf.count)
            if n <= 0 { break }
            data += buf[0..<n]
            if data.contains(UInt8(ascii: "\n")) { break }
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
