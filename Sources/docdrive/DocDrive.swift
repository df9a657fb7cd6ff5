// DocDrive: the `docdrive` command, its subcommands, and how errors leave it.
import ArgumentParser
import DocDriveCore
import Foundation

@main
struct DocDrive: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "docdrive",
        abstract: "One folder over your apps' documents and your storage providers.",
        discussion: """
        The drive lives in $DOCDRIVE_HOME (default ~/.local/share/docdrive). Start with
        `docdrive init`, add apps and stores, then `docdrive mount ~/Drive`.
        Exit codes: \(ExitCodes.summary)
        """,
        version: "0.1.0",
        subcommands: [Init.self, App.self, Store.self, Mount.self, Unmount.self, Status.self, Sync.self,
                      OpenDocument.self, ImportDocument.self, MoveDocument.self, ExportDocument.self, Bookmark.self, Grants.self,
                      Query.self]
    )
}

/// Options every subcommand shares.
struct DriveOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The drive's folder (overrides $DOCDRIVE_HOME).", valueName: "path"))
    var home: String?

    var driveHome: DriveHome {
        if let home { return DriveHome(path: DriveHome.absolute(home)) }
        return DriveHome.fromEnvironment()
    }
}

/// Runs a command body; a DriveError becomes one sentence on stderr and its exit code.
func guarded(_ body: () throws -> Void) throws {
    do {
        try body()
    } catch let e as DriveError {
        FileHandle.standardError.write(Data("docdrive: \(e.message)\n".utf8))
        throw ExitCode(ExitCodes.code(for: e.code))
    }
}

func printJSON(_ value: Any) {
    if let data = try? JSONSerialization.data(withJSONObject: value, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]),
       let s = String(data: data, encoding: .utf8) {
        print(s)
    }
}

func warn(_ s: String, newline: Bool = true) {
    FileHandle.standardError.write(Data((s + (newline ? "\n" : "")).utf8))
}
