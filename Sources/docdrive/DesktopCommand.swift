// DesktopCommand: `docdrive desktop install|uninstall`: the file manager extension (emblems,
// "Keep on this device", "Free up space", "Show conflicts") where Nautilus's and Nemo's python
// bindings look for extensions; it asks the daemons' status sockets (StatusServer).
import ArgumentParser
import DocDriveCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct Desktop: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the drive's sync state in the file manager (Nautilus, Nemo).",
        subcommands: [Install.self, Uninstall.self])

    static let fileName = "docdrive_files.py"

    /// The folders the file managers' python bindings read extensions from (the user's).
    static func extensionFolders(env: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        let data = env["XDG_DATA_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? ((env["HOME"] ?? NSHomeDirectory()) + "/.local/share")
        return ["nautilus-python", "nemo-python"].map { data + "/" + $0 + "/extensions" }
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
            abstract: "Put the file manager extension in place (restart the file manager to load it: nautilus -q).")
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            let text = Desktop.extensionText()
            var written = [String]()
            for folder in Desktop.extensionFolders() {
                let path = folder + "/" + Desktop.fileName
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
            if socketFolder == nil { print("Note: XDG_RUNTIME_DIR is not set here; the daemon's status socket needs it.") }
        }
    }

    struct Uninstall: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove the file manager extension.")
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            var removed = [String]()
            for folder in Desktop.extensionFolders() {
                let path = folder + "/" + Desktop.fileName
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
}
