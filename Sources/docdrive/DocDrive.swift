// DocDrive: the `docdrive` command, its subcommands, and how errors leave it.
import ArgumentParser
import DocDriveCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

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
        subcommands: [Init.self, App.self, Store.self, Mount.self, Unmount.self, Status.self, Sync.self, Device.self,
                      OpenDocument.self, ImportDocument.self, MoveDocument.self, ExportDocument.self, Pick.self, Bookmark.self, Grants.self,
                      Service.self, Desktop.self, Migrate.self, Query.self, Pin.self, Unpin.self, Evict.self, Internal.self]
    )

    /// mount(8) and /etc/fstab reach the drive through fuse3's helper for the type
    /// fuse.docdrive, which runs `docdrive HOME MOUNTPOINT -o OPTIONS`: that is
    /// `docdrive mount --home HOME MOUNTPOINT -o OPTIONS`.
    static func main() {
        // `docdrive query` in its plain forms never gets here: the front (DocDriveFront), the program
        // users run as `docdrive`, answers it and execs this one for everything else.
        let args = Array(CommandLine.arguments.dropFirst())
        main(MountHelperArguments.rewrite(args, subcommands: configuration.subcommands.map { $0._commandName }) ?? args)
    }
}

/// The arguments mount.fuse3 passes, as those of `docdrive mount`.
enum MountHelperArguments {
    /// Options that belong to mount(8) and fstab, not to the file system.
    static let fstabOnly: Set<String> = ["defaults", "_netdev", "nofail", "auto", "noauto", "user", "users", "nouser", "owner", "group", "comment"]

    static func rewrite(_ args: [String], subcommands: [String]) -> [String]? {
        guard args.count >= 2, !args[0].hasPrefix("-"), !args[1].hasPrefix("-"), !subcommands.contains(args[0]),
              FileManager.default.fileExists(atPath: args[0] + "/config.yaml") else { return nil }
        var out = ["mount", "--home", args[0], args[1]]
        var i = 2
        while i < args.count {
            if args[i] == "-o", i + 1 < args.count {
                let kept = Mount.splitOptions([args[i + 1]]).filter { o in
                    !fstabOnly.contains(o) && !o.hasPrefix("x-") && !o.hasPrefix("comment=")
                }
                if !kept.isEmpty { out += ["-o", kept.joined(separator: ",")] }
                i += 2
            } else {
                out.append(args[i])
                i += 1
            }
        }
        return out
    }
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

/// A typed value as the objects JSONSerialization prints, for printJSON: the commands print what
/// they printed when the control socket's answers were dictionaries, to the digit.
func jsonObject(_ value: some Encodable) -> Any {
    // Read back, a number such as 3.2e-05 becomes an NSDecimalNumber, printed 0.000032: it goes
    // back to the Double it was (the encoder wrote the shortest digits that give it back).
    func doubles(_ o: Any) -> Any {
        switch o {
        case let d as NSDecimalNumber: return Double(d.description) ?? d
        case let a as [Any]: return a.map(doubles)
        case let m as [String: Any]: return m.mapValues(doubles)
        default: return o
        }
    }
    guard let data = try? JSONEncoder().encode(value), let object = try? JSONSerialization.jsonObject(with: data) else { return [String: Any]() }
    return doubles(object)
}

func warn(_ s: String, newline: Bool = true) {
    FileHandle.standardError.write(Data((s + (newline ? "\n" : "")).utf8))
}
