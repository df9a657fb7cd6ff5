// DesktopCommand: `docdrive desktop install|uninstall`: the file manager extension (emblems,
// "Keep on this device", "Free up space", "Show conflicts") where Nautilus's and Nemo's python
// bindings look for extensions; it asks the daemons' status sockets (StatusServer). And the
// D-Bus activation file of the document picker's service (org.docdrive.Picker1), which D-Bus
// starts as `docdrive desktop picker-service` (hidden).
import ArgumentParser
import DocDriveCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct Desktop: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the drive's sync state in the file manager (Nautilus, Nemo), and the document picker on the session bus.",
        subcommands: [Install.self, Uninstall.self, PickerService.self])

    static let fileName = "docdrive_files.py"

    /// The folders the file managers' python bindings read extensions from (the user's).
    static func extensionFolders(env: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        let data = env["XDG_DATA_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? ((env["HOME"] ?? NSHomeDirectory()) + "/.local/share")
        return ["nautilus-python", "nemo-python"].map { data + "/" + $0 + "/extensions" }
    }

    /// The picker's D-Bus name, and where the session bus looks for the activation files of the
    /// user's services.
    static let pickerBusName = "org.docdrive.Picker1"
    static func busServiceFile(env: [String: String] = ProcessInfo.processInfo.environment) -> String {
        let data = env["XDG_DATA_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? ((env["HOME"] ?? NSHomeDirectory()) + "/.local/share")
        return data + "/dbus-1/services/" + pickerBusName + ".service"
    }

    /// The activation file: D-Bus runs this docdrive's picker service on the first call.
    static func busServiceText() -> String {
        "[D-BUS Service]\nName=\(pickerBusName)\nExec=\(Executable.commandPath) desktop picker-service\n"
    }

    /// The extension's text, with this docdrive's path in it (the menu items run it).
    static func extensionText() -> String { pythonText(PackageResources.docdrive_files_py) }

    /// One of the desktop's python programs as it runs: the status socket's client
    /// (docdrive_status.py), then the program's own text, with this docdrive's path in it.
    static func pythonText(_ program: [UInt8]) -> String {
        (String(decoding: PackageResources.docdrive_status_py, as: UTF8.self) + "\n\n" + String(decoding: program, as: UTF8.self))
            .replacingOccurrences(of: "\"@DOCDRIVE@\"", with: ControlProtocol.jsonString(Executable.commandPath))
    }

    struct Install: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Put the file manager extension (restart the file manager to load it: nautilus -q) and the picker's D-Bus activation file in place.")
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            let text = Desktop.extensionText()
            var written = [String]()
            let files = Desktop.extensionFolders().map { ($0 + "/" + Desktop.fileName, text) }
                + [(Desktop.busServiceFile(), Desktop.busServiceText())]
            for (path, text) in files {
                let folder = (path as NSString).deletingLastPathComponent
                do {
                    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
                    try Data(text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
                    _ = chmod(path, 0o644)
                    written.append(path)
                } catch {
                    warn("docdrive: cannot write \(path): \(error.localizedDescription)")
                    throw ExitCode(ExitCodes.code(for: .io))
                }
            }
            let socketFolder = StatusServer.folder()
            if json {
                printJSON(["installed": written, "socketFolder": socketFolder ?? NSNull()] as [String: Any])
                return
            }
            for p in written { print("Installed \(p)") }
            print("Restart the file manager to load it (nautilus -q; nemo -q). Needs python3-nautilus (or nemo-python).")
            print("The document picker answers on the session bus as \(Desktop.pickerBusName) (needs python3-gi and gir1.2-gtk-3.0).")
            if socketFolder == nil { print("Note: XDG_RUNTIME_DIR is not set here; the daemon's status socket needs it.") }
        }
    }

    struct Uninstall: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove the file manager extension and the picker's D-Bus activation file.")
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            var removed = [String]()
            for path in Desktop.extensionFolders().map({ $0 + "/" + Desktop.fileName }) + [Desktop.busServiceFile()] {
                if unlink(path) == 0 {
                    removed.append(path)
                } else if errno != ENOENT {
                    warn("docdrive: cannot remove \(path): \(String(cString: strerror(errno)))")
                    throw ExitCode(ExitCodes.code(for: .io))
                }
            }
            if json {
                printJSON(["removed": removed])
                return
            }
            print(removed.isEmpty ? "The file manager extension was not installed." : removed.map { "Removed \($0)" }.joined(separator: "\n"))
        }
    }

    /// What D-Bus starts for the picker's name (the activation file's Exec): the service
    /// program (Desktop/docdrive_picker_service.py), which runs `docdrive pick` for each call.
    struct PickerService: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "picker-service", abstract: "The document picker's D-Bus service (D-Bus starts it).", shouldDisplay: false)

        func run() throws {
            guard access(Pick.python, X_OK) == 0 else {
                warn("docdrive: The picker needs \(Pick.python) with GTK 3 for python3: apt install python3-gi gir1.2-gtk-3.0.")
                throw ExitCode(ExitCodes.failure)
            }
            try Pick.execPython(Desktop.pythonText(PackageResources.docdrive_picker_service_py), name: "docdrive-picker-service", arguments: [])
        }
    }
}
