// PickCommand: `docdrive pick`, the document picker: a window in which the user chooses, for an
// app, documents of the drive (open, import) or a store folder for the app's documents (move-to,
// export-to); the mode is then carried out by `docdrive open`, `import`, `move` or `export`. The
// window is GTK 3 through python3-gi (Desktop/docdrive_picker.py, after the status socket's
// client it shares with the file manager extension). This command gathers what the window needs
// (the mount, the apps and stores as `docdrive status` reads them, the status socket), checks
// what it can before a window opens, and becomes the picker program: exec, so the process, its
// standard streams and its exit status are the picker's. An error found here is said by the
// picker too, in a window of its own and on stderr.
import ArgumentParser
import CDocDriveSys
import DocDriveCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The Document Picker's four modes, as `pick --mode` names them.
enum PickMode: String, ExpressibleByArgument, CaseIterable {
    case open
    case `import`
    case moveTo = "move-to"
    case exportTo = "export-to"

    /// move-to and export-to choose a folder for the app's documents; open and import choose documents.
    var choosesFolder: Bool { self == .moveTo || self == .exportTo }
}

struct Pick: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The document picker: a window to choose a document for an app (open, import), or a store folder for its documents (move-to, export-to).",
        discussion: """
        The window shows the drive's stores and public apps with each file's sync state. Its Open \
        button carries the mode out as `docdrive open`, `import`, `move` or `export` do, and the \
        command prints the resulting paths (the reference, the Inbox copy, the document's new place \
        or the exported copy), one a line, or JSON; an error is one sentence in the window and on \
        stderr, and the window stays. Cancel or Escape exits 1 and changes nothing. Ctrl+L types a \
        path; Alt+R shows Recent, what the app picked lately. Needs a graphical session and \
        python3-gi with gir1.2-gtk-3.0.
        """)

    /// The program that shows the window: Debian's python3, which python3-gi is for.
    static let python = "/usr/bin/python3"
    /// The name the picker runs under (argv[0]): the drive refuses it placeholders' content, as
    /// it does desktop indexers (BackgroundReaders), so that browsing downloads nothing.
    static let programName = "docdrive-picker"

    @OptionGroup var drive: DriveOptions
    @Option(help: "The app's id.") var app: String
    @Option(help: ArgumentHelp("What happens to the choice: open, import, move-to or export-to.", valueName: "mode")) var mode: PickMode
    @Option(name: .customLong("type"),
            help: ArgumentHelp("Show only documents of this type: a MIME type (text/plain, image/*) or a name pattern (*.odt); repeat it for several.",
                               valueName: "MIME-or-glob"))
    var types: [String] = []
    @Flag(help: "Let the user choose several documents (open, import).") var multiple = false
    @Option(help: "The window's title.") var title: String?
    @Flag(help: "Print JSON.") var json = false
    @Argument(help: ArgumentHelp("move-to, export-to: the app's documents to move or copy into the chosen folder.", valueName: "document"))
    var documents: [String] = []

    func validate() throws {
        if mode.choosesFolder {
            if documents.isEmpty { throw ValidationError("--mode \(mode.rawValue) needs the app's documents to \(mode == .moveTo ? "move" : "export").") }
            if multiple { throw ValidationError("--multiple is for --mode open and import; \(mode.rawValue) chooses one folder.") }
        } else if !documents.isEmpty {
            throw ValidationError("--mode \(mode.rawValue) takes no documents: the user chooses them in the window.")
        }
        if let t = types.first(where: { $0.isEmpty || $0.contains("\0") }) { throw ValidationError("--type \"\(t)\" is not a MIME type or a name pattern.") }
    }

    func run() throws {
        let home = drive.driveHome
        var job: [String: Any] = ["docdrive": Executable.commandPath, "home": home.path, "app": app, "mode": mode.rawValue,
                                  "types": types, "multiple": multiple, "json": json, "title": title ?? NSNull()]
        do throws(DriveError) {
            try gather(home, into: &job)
        } catch {
            job["error"] = ["message": error.message, "exit": ExitCodes.code(for: error.code)] as [String: Any]
        }
        guard access(Self.python, X_OK) == 0 else {
            if let e = job["error"] as? [String: Any], let m = e["message"] as? String { warn("docdrive: \(m)") }
            warn("docdrive: The picker needs \(Self.python) with GTK 3 for python3: apt install python3-gi gir1.2-gtk-3.0.")
            throw ExitCode(ExitCodes.failure)
        }
        try Self.execPicker(job)
    }

    /// The mount, the app, the documents, the stores and apps with their folders in the mount,
    /// whether each store is offline (the daemon's status, as `docdrive status` asks it), the
    /// status socket.
    func gather(_ home: DriveHome, into job: inout [String: Any]) throws(DriveError) {
        let snapshot = try Status.snapshot(home)
        let record = try liveMount(home)
        guard snapshot.config.apps.contains(where: { $0.id == app }) else { throw DriveError.noSuchApp(app) }
        var docs = [String]()
        for d in documents { docs.append(try mountRelative(d, home: home)) }
        let mnt = record.mountpoint.count > 1 && record.mountpoint.hasSuffix("/") ? String(record.mountpoint.dropLast()) : record.mountpoint
        job["mountpoint"] = mnt
        job["documents"] = docs
        job["apps"] = snapshot.config.apps.map {
            ["id": $0.id, "name": $0.name, "public": $0.isPublic, "folder": mnt + "/" + $0.name] as [String: Any]
        }
        job["stores"] = snapshot.stores.map { c, s -> [String: Any] in
            let offline: Any = s.remote?.offlineSince == nil ? NSNull() : (s.remote?.offlineReason ?? "its remote does not answer")
            return ["name": c.name, "display": c.displayName, "folder": mnt + "/" + c.displayName, "offline": offline]
        }
        job["statusSocket"] = StatusServer.folder().map { $0 + "/" + StatusServer.socketName(mountpoint: record.mountpoint) } ?? NSNull()
    }

    /// Becomes the picker, with the job as its one argument.
    static func execPicker(_ job: [String: Any]) throws {
        guard let data = try? JSONSerialization.data(withJSONObject: job, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            warn("docdrive: The picker's arguments could not be written as JSON.")
            throw ExitCode(ExitCodes.failure)
        }
        try execPython(Desktop.pythonText(PackageResources.docdrive_picker_py), name: programName, arguments: [String(decoding: data, as: UTF8.self)])
    }

    /// Becomes Debian's python3 running `text`, held in a memory file (no file to write or clean
    /// up), as the program `name` (argv[0]).
    static func execPython(_ text: String, name: String, arguments: [String]) throws {
        // Not close-on-exec: python3 opens it again as /proc/self/fd/N.
        let fd = dd_memfd(name + ".py")
        guard fd >= 0 else {
            warn("docdrive: Cannot make the picker's memory file: \(String(cString: strerror(errno))).")
            throw ExitCode(ExitCodes.failure)
        }
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                warn("docdrive: Cannot write the picker's memory file: \(String(cString: strerror(errno))).")
                throw ExitCode(ExitCodes.failure)
            }
            bytes = bytes.dropFirst(n)
        }
        let argv = [name, "/proc/self/fd/\(fd)"] + arguments
        var cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        execv(python, &cargs)
        warn("docdrive: Cannot run \(python): \(String(cString: strerror(errno))).")
        throw ExitCode(ExitCodes.failure)
    }
}
