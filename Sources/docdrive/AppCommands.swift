// AppCommands: `docdrive app add|list|remove`: application containers.
import ArgumentParser
import DocDriveCore
import Foundation

struct App: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage application containers.",
        subcommands: [Add.self, List.self, Remove.self, Close.self])

    struct Add: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add an app container (Documents, Data, Inbox).")
        @OptionGroup var drive: DriveOptions
        @Argument(help: "The app's id, reverse-DNS style (org.example.notes).") var id: String
        @Option(help: "The name its public Documents folder shows under.") var name: String?
        @Flag(help: "Show the app's Documents at the top of the mount.") var `public` = false

        func run() throws {
            try guarded {
                let home = drive.driveHome
                try home.addApp(AppConfig(id: id, name: name ?? id, isPublic: self.public))
                print("Added app \(id)" + (self.public ? ", shown as \"\(name ?? id)\"." : " (private: only in .by-app/\(id))."))
            }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the app containers.")
        @OptionGroup var drive: DriveOptions
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            try guarded {
                let home = drive.driveHome
                let config = try home.loadConfig()
                if json {
                    printJSON(config.apps.map { ["id": $0.id, "name": $0.name, "public": $0.isPublic, "path": home.containerPath($0.id)] as [String: Any] })
                    return
                }
                if config.apps.isEmpty { print("No apps. Add one with `docdrive app add ID --name NAME --public`."); return }
                for app in config.apps {
                    print("\(app.id)\t\(app.name)\t\(app.isPublic ? "public" : "private")")
                }
            }
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove an app container from the drive (its files stay on disk unless --delete-files).")
        @OptionGroup var drive: DriveOptions
        @Argument var id: String
        @Flag(help: "Also delete the container's files.") var deleteFiles = false

        func run() throws {
            try guarded {
                let home = drive.driveHome
                try home.removeApp(id: id, deleteFiles: deleteFiles)
                if deleteFiles {
                    print("Removed app \(id) and deleted its files.")
                } else {
                    print("Removed app \(id); its files stay in \(home.containerPath(id)).")
                }
            }
        }
    }

    struct Close: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The app is done: remove its import copies from its Inbox.")
        @OptionGroup var options: RequestOptions
        @Argument var id: String

        func run() throws {
            try options.send(ControlRequest.AppClose(app: id)) { r, _ in "Removed \(r.removed) import copies of \(id)." }
        }
    }
}
