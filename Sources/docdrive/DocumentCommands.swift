// DocumentCommands: the Document Picker's modes (open, import, move, export), bookmarks and
// grants. They ask the running daemon, through its control socket.
import ArgumentParser
import DocDriveCore
import Foundation

/// A path as the user gave it -> relative to the mount root. Absolute paths must be inside the
/// mount; "./x" and "../x" are taken from the current folder; anything else is from the root.
func mountRelative(_ path: String, home: DriveHome) throws(DriveError) -> String {
    let record = try liveMount(home)
    var p = path
    if p.hasPrefix("./") || p.hasPrefix("../") || p == "." {
        p = FileManager.default.currentDirectoryPath + "/" + p
    }
    guard p.hasPrefix("/") else { return p }
    let parts = p.split(separator: "/").reduce(into: [Substring]()) { acc, part in
        if part == "." { return }
        if part == ".." { _ = acc.popLast(); return }
        acc.append(part)
    }
    let normal = "/" + parts.joined(separator: "/")
    let mnt = record.mountpoint.hasSuffix("/") ? String(record.mountpoint.dropLast()) : record.mountpoint
    guard normal.hasPrefix(mnt + "/") else {
        throw DriveError(.invalidName, "\(path) is not inside the drive mounted at \(record.mountpoint).")
    }
    return String(normal.dropFirst(mnt.count + 1))
}

/// The record of the drive's live mount, or the sentence of every command that needs one.
func liveMount(_ home: DriveHome) throws(DriveError) -> MountRecord {
    guard let record = home.liveMountRecord() else {
        throw DriveError(.notMounted, "The drive is not mounted; mount it first (`docdrive mount DIR`).")
    }
    return record
}

/// Options of the commands that talk to the daemon.
struct RequestOptions: ParsableArguments {
    @OptionGroup var drive: DriveOptions
    @Flag(help: "Print JSON.") var json = false

    /// Sends a request; prints its answer as JSON (with each path's absolute form beside it:
    /// "copy_absolute"), or the text `describe` makes of it and the mount point.
    func send<C: ControlCommand>(_ command: C, _ describe: (C.Answer, String) -> String) throws {
        try guarded {
            let home = drive.driveHome
            let answer = try ControlClient.call(home, command)
            let mnt = home.liveMountRecord()?.mountpoint ?? ""
            if !json {
                print(describe(answer, mnt))
                return
            }
            var result = jsonObject(answer) as? [String: Any] ?? [:]
            for key in ["reference", "target", "copy", "path", "source"] {
                if let rel = result[key] as? String { result[key + "_absolute"] = mnt + "/" + rel }
            }
            printJSON(result)
        }
    }
}

struct OpenDocument: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open",
        abstract: "Open mode: give an app a reference to a document kept in a store.",
        discussion: "Writes a reference entry into the app's Documents (or --into a folder there) and records a grant. Prints the reference's path.")
    @OptionGroup var options: RequestOptions
    @Option(help: "The app's id.") var app: String
    @Argument(help: "The document, e.g. Work/report.odt (relative to the mount, or an absolute path in it).") var path: String
    @Option(name: .customLong("as"), help: "The name the reference shows under.") var name: String?
    @Option(help: "A folder inside the app's Documents.") var into: String?
    @Flag(help: "Fail on a name clash instead of choosing a free name.") var noRename = false

    func run() throws {
        let rel = try mountRelativeOrExit(path, options)
        try options.send(ControlRequest.Open(app: app, path: rel, name: name, into: into, noRename: noRename)) { r, mnt in mnt + "/" + r.reference }
    }
}

struct ImportDocument: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import mode: copy a document into the app's Inbox (removed at unmount and by `app close`).")
    @OptionGroup var options: RequestOptions
    @Option(help: "The app's id.") var app: String
    @Argument(help: "The document (relative to the mount, or an absolute path in it).") var path: String

    func run() throws {
        let rel = try mountRelativeOrExit(path, options)
        try options.send(ControlRequest.Import(app: app, path: rel)) { r, mnt in mnt + "/" + r.copy }
    }
}

/// What move and export take: an app's document and the store (and folder) it goes to.
struct TransferOptions: ParsableArguments {
    @OptionGroup var options: RequestOptions
    @Option(help: "The app's id.") var app: String
    @Argument(help: "The document in the app's container.") var path: String
    @Option(help: "STORE or STORE/FOLDER (a store's name or display name).") var to: String
    @Flag(help: "Fail on a name clash instead of choosing a free name.") var noRename = false

    /// The document, mount-relative.
    func relativePath() throws -> String { try mountRelativeOrExit(path, options) }
}

struct MoveDocument: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "move",
        abstract: "MoveToService: move an app's document into a store, leaving a reference in its place.")
    @OptionGroup var transfer: TransferOptions

    func run() throws {
        let t = transfer
        try t.options.send(ControlRequest.Move(app: t.app, path: t.relativePath(), to: t.to, noRename: t.noRename)) { r, mnt in
            "\(mnt)/\(r.target) (reference left at \(mnt)/\(r.reference))"
        }
    }
}

struct ExportDocument: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "ExportToService: copy an app's document into a store; the original stays.")
    @OptionGroup var transfer: TransferOptions

    func run() throws {
        let t = transfer
        try t.options.send(ControlRequest.Export(app: t.app, path: t.relativePath(), to: t.to, noRename: t.noRename)) { r, mnt in mnt + "/" + r.copy }
    }
}

struct Bookmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Signed bookmarks that find a document again after it was renamed or moved.",
        subcommands: [Create.self, Resolve.self])

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a bookmark (URL-safe text) for a document the app may use.")
        @OptionGroup var options: RequestOptions
        @Option(help: "The app's id.") var app: String
        @Argument(help: "A document in the app's container, a reference, or a store item it holds a grant for.") var path: String

        func run() throws {
            let rel = try mountRelativeOrExit(path, options)
            try options.send(ControlRequest.BookmarkCreate(app: app, path: rel)) { r, _ in r.token }
        }
    }

    struct Resolve: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print where a bookmark's document is now, and whether the bookmark is stale.")
        @OptionGroup var options: RequestOptions
        @Option(help: "The app's id.") var app: String
        @Argument(help: "The bookmark.") var token: String

        func run() throws {
            try options.send(ControlRequest.BookmarkResolve(app: app, token: token)) { r, mnt in "\(mnt)/\(r.path)\nstale: \(r.stale)" }
        }
    }
}

struct Grants: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Which app may use which store document through its own view (.by-app/ID).",
        subcommands: [List.self, Revoke.self])

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List grants.")
        @OptionGroup var options: RequestOptions
        @Option(help: "Only this app's grants.") var app: String?

        func run() throws {
            try options.send(ControlRequest.GrantsList(app: app)) { r, _ in
                r.grants.isEmpty ? "No grants." : r.grants.map { "\($0.app)\t\($0.path)\t\($0.status)" }.joined(separator: "\n")
            }
        }
    }

    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Take a grant back: the app's view stops opening the document at once.")
        @OptionGroup var options: RequestOptions
        @Option(help: "The app's id.") var app: String
        @Argument(help: "The store document, or the app's reference to it.") var path: String

        func run() throws {
            let rel = try mountRelativeOrExit(path, options)
            try options.send(ControlRequest.GrantsRevoke(app: app, path: rel)) { _, _ in "Revoked \(app)'s grant for \(path)." }
        }
    }
}

/// `mountRelative`, with its error printed like every other one.
func mountRelativeOrExit(_ path: String, _ options: RequestOptions) throws -> String {
    var rel = ""
    try guarded { rel = try mountRelative(path, home: options.drive.driveHome) }
    return rel
}
