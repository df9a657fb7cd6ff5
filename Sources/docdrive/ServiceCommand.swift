// ServiceCommand: `docdrive service install|uninstall`: a systemd unit that mounts the drive at
// login (a user unit; a system unit for root) and unmounts it, uploads drained, at logout or stop.
import ArgumentParser
import DocDriveCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct Service: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Start the drive with systemd: at login (user) or at boot (root).",
        subcommands: [Install.self, Uninstall.self])

    /// Where a unit goes: the user's units, or the system's for root.
    static func unitFolder(env: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if geteuid() == 0 { return env["DOCDRIVE_SYSTEMD_DIR"] ?? "/etc/systemd/system" }
        let config = env["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? ((env["HOME"] ?? NSHomeDirectory()) + "/.config")
        return env["DOCDRIVE_SYSTEMD_DIR"] ?? config + "/systemd/user"
    }

    /// One unit per drive: "docdrive" for the default home, else "docdrive-" and a name made of
    /// the home's last folder and a short hash of its path (two homes never share a unit).
    static func unitName(_ home: DriveHome) -> String {
        if home.path == DriveHome.fromEnvironment(["HOME": NSHomeDirectory()]).path { return "docdrive.service" }
        let base = String((home.path.split(separator: "/").last ?? "drive").map { $0.isLetter || $0.isNumber ? $0 : "-" }.prefix(32))
        var h: UInt32 = 2166136261
        for b in home.path.utf8 { h = (h ^ UInt32(b)) &* 16777619 }
        return "docdrive-\(base)-\(String(h, radix: 16)).service"
    }

    /// systemd runs here (as the system manager, and for a user unit with a user manager).
    static func systemdRuns() -> Bool {
        FileManager.default.fileExists(atPath: "/run/systemd/system")
    }

    static func systemctl(_ args: [String]) -> (Int32, String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["systemctl"] + (geteuid() == 0 ? [] : ["--user"]) + args
        let pipe = Pipe()
        p.standardError = pipe
        p.standardOutput = pipe
        do { try p.run() } catch { return (127, "\(error)") }
        let out = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        return (p.terminationStatus, out.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    struct Install: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write a systemd unit (Type=notify) that mounts the drive and enable it.")

        @OptionGroup var drive: DriveOptions
        @Argument(help: "Where to mount (default ~/Drive).") var mountpoint: String?
        @Option(help: ArgumentHelp("Seconds the unit lets the daemon upload at stop.", valueName: "seconds")) var uploadGrace: Double = 30
        @Flag(help: "Write the unit only: do not enable or start it.") var noStart = false
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            try guarded {
                let home = drive.driveHome
                _ = try home.loadConfig()
                let mp = DriveHome.absolute(mountpoint ?? (NSHomeDirectory() + "/Drive"))
                let bin = Executable.commandPath
                let folder = Service.unitFolder()
                let name = Service.unitName(home)
                let unit = Service.unitText(binary: bin, home: home.path, mountpoint: mp, uploadGrace: uploadGrace, system: geteuid() == 0)
                try DriveHome.makeFolder(folder)
                try DriveHome.write(unit, to: folder + "/" + name)
                var started = false
                var note = "systemd is not running here: start the drive with `systemctl \(geteuid() == 0 ? "" : "--user ")enable --now \(name)` where it is."
                if !noStart, Service.systemdRuns() {
                    _ = Service.systemctl(["daemon-reload"])
                    let (rc, out) = Service.systemctl(["enable", "--now", name])
                    guard rc == 0 else {
                        throw DriveError(.io, "The unit \(folder)/\(name) is written, but systemd could not start it: \(out.isEmpty ? "exit \(rc)" : out)")
                    }
                    started = true
                    note = "enabled and started: the drive mounts at \(mp) at every \(geteuid() == 0 ? "boot" : "login")."
                } else if noStart {
                    note = "written, not enabled (--no-start)."
                }
                if json {
                    printJSON(["unit": folder + "/" + name, "name": name, "mountpoint": mp, "started": started])
                } else {
                    print("Wrote \(folder)/\(name): \(note)")
                }
            }
        }
    }

    struct Uninstall: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop, disable and remove the drive's systemd unit.")

        @OptionGroup var drive: DriveOptions

        func run() throws {
            try guarded {
                let name = Service.unitName(drive.driveHome)
                let path = Service.unitFolder() + "/" + name
                guard FileManager.default.fileExists(atPath: path) else {
                    throw DriveError(.notFound, "There is no unit \(path) to remove.")
                }
                if Service.systemdRuns() { _ = Service.systemctl(["disable", "--now", name]) }
                unlink(path)
                if Service.systemdRuns() { _ = Service.systemctl(["daemon-reload"]) }
                print("Removed \(path).")
            }
        }
    }

    /// The unit: the daemon in the foreground (systemd keeps it), ready when the mount serves;
    /// a stop (SIGTERM) unmounts and uploads for up to `uploadGrace` seconds first.
    static func unitText(binary: String, home: String, mountpoint: String, uploadGrace: Double, system: Bool) -> String {
        func quoted(_ s: String) -> String {
            "\"" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
                .replacingOccurrences(of: "%", with: "%%") + "\""
        }
        let grace = Int(uploadGrace.rounded(.up))
        return """
        # Written by `docdrive service install`; `docdrive service uninstall` removes it.
        [Unit]
        Description=DocDrive at \(mountpoint)
        After=network-online.target
        Wants=network-online.target

        [Service]
        Type=notify
        ExecStart=\(quoted(binary)) mount --home \(quoted(home)) --upload-grace \(grace) --foreground \(quoted(mountpoint))
        KillSignal=SIGTERM
        TimeoutStopSec=\(grace + 30)
        Restart=on-failure
        RestartSec=5

        [Install]
        WantedBy=\(system ? "multi-user.target" : "default.target")

        """
    }
}
