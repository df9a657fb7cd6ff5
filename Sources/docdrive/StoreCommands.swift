// StoreCommands: `docdrive store add|list|remove`: provider stores.
import ArgumentParser
import DocDriveCore
import Foundation

struct Store: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage provider stores.",
        subcommands: [Add.self, List.self, Remove.self])

    struct Add: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add a store: a local copy under the drive home plus a remote.")
        @OptionGroup var drive: DriveOptions
        @Argument(help: "The store's short name (lowercase letters, digits, - and _).") var name: String
        @Option(name: .customLong("name"), help: "The name it shows under at the top of the mount.") var display: String?
        @Option(help: "The folder remote: a directory elsewhere (a NAS mount, a USB disk).") var folder: String
        @Option(help: ArgumentHelp("Seconds between a save and its upload (repeated saves become one upload).", valueName: "seconds"))
        var writeback: Double = StoreConfig.defaultWritebackDelay
        @Option(help: ArgumentHelp("Files uploaded at once (1-64).", valueName: "n"))
        var workers: Int = StoreConfig.defaultWorkers
        @Option(help: ArgumentHelp("Limit the store's uploads to this many bytes per second (500K, 10M; default: no limit).", valueName: "rate"))
        var bandwidth: String?
        @Option(help: ArgumentHelp("Seconds between two looks at the remote for other devices' changes (default 10).", valueName: "seconds"))
        var poll: Double = StoreConfig.defaultPoll

        func run() throws {
            try guarded {
                let home = drive.driveHome
                guard folder.hasPrefix("/") else {
                    throw DriveError(.invalidConfig, "--folder \(folder) must be an absolute path (like /mnt/nas/work).")
                }
                var limit: Int64?
                if let bandwidth {
                    guard let b = StoreConfig.parseBandwidth(bandwidth) else {
                        throw DriveError(.invalidConfig, "--bandwidth \(bandwidth) is not a rate in bytes per second (like 500K or 10M).")
                    }
                    limit = b == 0 ? nil : b
                }
                guard StoreConfig.pollRange.contains(poll) else {
                    throw DriveError(.invalidConfig, "--poll \(poll) must be between 0.2 and 86400 seconds.")
                }
                let joining = FileManager.default.fileExists(atPath: folder + "/" + FolderRemote.markerName)
                let added = try home.addStore(StoreConfig(name: name, displayName: display ?? name, remote: .folder(path: folder), writebackDelay: writeback,
                                                          workers: workers, bandwidth: limit, poll: poll))
                if joining {
                    print("Joined store \(name), shown as \"\(display ?? name)\": the folder remote \(added.remote.summary.dropFirst("folder ".count)) is already a store (another device's); what it holds is downloaded at the next mount.")
                    return
                }
                print("Added store \(name), shown as \"\(display ?? name)\", with the folder remote \(added.remote.summary.dropFirst("folder ".count)).")
            }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the stores.")
        @OptionGroup var drive: DriveOptions
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            try guarded {
                let home = drive.driveHome
                let config = try home.loadConfig()
                if json {
                    printJSON(config.stores.map { s -> [String: Any] in
                        var r: [String: Any] = ["name": s.name, "display": s.displayName, "cache": home.cachePath(s.name), "remoteType": s.remote.kind]
                        if case .folder(let p) = s.remote { r["remotePath"] = p }
                        return r
                    })
                    return
                }
                if config.stores.isEmpty { print("No stores. Add one with `docdrive store add NAME --name DISPLAY --folder PATH`."); return }
                for s in config.stores {
                    print("\(s.name)\t\(s.displayName)\t\(s.remote.summary)")
                }
            }
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a store from the drive (its local copy stays unless --delete-cache; the remote is never touched).")
        @OptionGroup var drive: DriveOptions
        @Argument var name: String
        @Flag(help: "Also delete the local copy under the drive home.") var deleteCache = false

        func run() throws {
            try guarded {
                let home = drive.driveHome
                try home.removeStore(name: name, deleteCache: deleteCache)
                if deleteCache {
                    print("Removed store \(name) and deleted its local copy; its remote is untouched.")
                } else {
                    print("Removed store \(name); its local copy stays in \(home.cachePath(name)) and its remote is untouched.")
                }
            }
        }
    }
}
