// StoreCommands: `docdrive store add|list|remove`: provider stores.
import ArgumentParser
import DocDriveCore
import Foundation

struct Store: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage provider stores.",
        subcommands: [Add.self, List.self, Remove.self, Retry.self])

    struct Add: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add a store: a local copy under the drive home plus a remote.")
        @OptionGroup var drive: DriveOptions
        @Argument(help: "The store's short name (lowercase letters, digits, - and _).") var name: String
        @Option(name: .customLong("name"), help: "The name it shows under at the top of the mount.") var display: String?
        @Option(help: "The folder remote: a directory elsewhere (a NAS mount, a USB disk).") var folder: String?
        @Option(help: ArgumentHelp("An S3 remote: the endpoint URL (https://s3.eu-west-1.amazonaws.com, http://127.0.0.1:8333).", valueName: "url"))
        var s3: String?
        @Option(help: "The S3 bucket (with --s3).") var bucket: String?
        @Option(help: "The folder of the bucket the store lives in (with --s3; default: the whole bucket).") var prefix: String = ""
        @Option(help: "The S3 region (with --s3).") var region: String = S3Settings.defaultRegion
        @Flag(help: "Put the bucket in the URL's path instead of its host name (with --s3; SeaweedFS, MinIO). An endpoint at an IP address or localhost always does.") var pathStyle = false
        @Option(help: ArgumentHelp("An AWS-style credentials file, mode 0600 (with --s3; default: the AWS_* variables or ~/.aws/credentials).", valueName: "path"))
        var credentialsFile: String?
        @Option(help: ArgumentHelp("Files larger than this go up in parts of this size (with --s3; 5M-5G).", valueName: "size"))
        var partSize: String?
        @Option(help: ArgumentHelp("Parts of one file sent at once (with --s3; 1-64).", valueName: "n"))
        var parallelParts: Int = S3Settings.defaultParallelParts
        @Flag(help: "Use an S3 server that ignores If-Match/If-None-Match, in a weaker mode: each write checks the object's version with a HEAD first, and two devices writing one file within that moment can lose an update (with --s3; see the README).")
        var acceptUnconditionalWrites = false

        func validate() throws {
            if (folder == nil) == (s3 == nil) {
                throw ValidationError("Give the remote with either --folder PATH or --s3 URL --bucket BUCKET.")
            }
            if s3 != nil && bucket == nil { throw ValidationError("--s3 needs --bucket BUCKET.") }
            if allLocal && onDemand { throw ValidationError("Give --all-local or --on-demand, not both.") }
            if s3 == nil && (bucket != nil || !prefix.isEmpty || pathStyle || credentialsFile != nil || partSize != nil || acceptUnconditionalWrites) {
                throw ValidationError("--bucket, --prefix, --path-style, --credentials-file, --part-size and --accept-unconditional-writes go with --s3.")
            }
        }

        /// The remote the options give.
        func remote() throws(DriveError) -> RemoteConfig {
            if let folder {
                guard folder.hasPrefix("/") else {
                    throw DriveError(.invalidConfig, "--folder \(folder) must be an absolute path (like /mnt/nas/work).")
                }
                return .folder(path: folder)
            }
            var part = S3Settings.defaultPartSize
            if let partSize {
                guard let p = StoreConfig.parseBandwidth(partSize), S3Settings.partSizeRange.contains(p) else {
                    throw DriveError(.invalidConfig, "--part-size \(partSize) is not a size between 5M and 5G (like 16M).")
                }
                part = p
            }
            let settings = S3Settings(endpoint: s3 ?? "", bucket: bucket ?? "", prefix: prefix, region: region, pathStyle: pathStyle,
                                      credentialsFile: credentialsFile, partSize: part, parallelParts: parallelParts,
                                      checkedWrites: acceptUnconditionalWrites)
            if let p = settings.problem(store: name) {
                throw DriveError(.invalidConfig, p.prefix(1).uppercased() + p.dropFirst() + ".")
            }
            return .s3(settings)
        }
        @Option(help: ArgumentHelp("Seconds between a save and its upload (repeated saves become one upload).", valueName: "seconds"))
        var writeback: Double = StoreConfig.defaultWritebackDelay
        @Option(help: ArgumentHelp("Files uploaded at once (1-64).", valueName: "n"))
        var workers: Int = StoreConfig.defaultWorkers
        @Option(help: ArgumentHelp("Limit the store's uploads to this many bytes per second (500K, 10M; default: no limit).", valueName: "rate"))
        var bandwidth: String?
        @Option(help: ArgumentHelp("Seconds between two looks at the remote for other devices' changes (default 10).", valueName: "seconds"))
        var poll: Double = StoreConfig.defaultPoll
        @Option(help: ArgumentHelp("S3: the longest what another tool (not DocDrive) writes in the bucket takes to appear: the whole bucket is listed this often (1h, 10m, 90s; default 1h). DocDrive's own writes appear at the next poll.", valueName: "time"))
        var reconcile: String?
        @Flag(help: "Download every file of the store as soon as it is listed (default: on demand, when opened, if the remote already holds documents; all local for a new, empty one).")
        var allLocal = false
        @Flag(help: "Show the remote's files as placeholders, downloaded when opened (the default when the remote already holds documents).")
        var onDemand = false
        @Option(help: ArgumentHelp("On demand: keep at most this much content on this device (20G, 500M); the least recently used files are evicted first.", valueName: "size"))
        var cacheLimit: String?
        @Flag(help: "On demand: let desktop indexers and thumbnailers (LocalSearch/Tracker, Baloo) download placeholders they open; by default they are refused.")
        var letIndexersDownload = false

        func run() throws {
            try guarded {
                let home = drive.driveHome
                let remote = try remote()
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
                var sweep = StoreConfig.defaultReconcile
                if let reconcile {
                    guard let r = StoreConfig.parseDuration(reconcile), StoreConfig.reconcileRange.contains(r) else {
                        throw DriveError(.invalidConfig, "--reconcile \(reconcile) is not a time between 1s and 7d (like 1h, 10m or 90s).")
                    }
                    sweep = r
                }
                var cache: Int64?
                if let cacheLimit {
                    guard let b = StoreConfig.parseBandwidth(cacheLimit), b == 0 || b >= 1 << 20 else {
                        throw DriveError(.invalidConfig, "--cache-limit \(cacheLimit) is not a size of at least 1M (like 20G or 500M; 0 for no limit).")
                    }
                    cache = b == 0 ? nil : b
                }
                let joining = folder.map { FileManager.default.fileExists(atPath: $0 + "/" + FolderRemote.markerName) } ?? false
                var config = StoreConfig(name: name, displayName: display ?? name, remote: remote, writebackDelay: writeback,
                                         workers: workers, bandwidth: limit, poll: poll)
                config.cacheLimit = cache
                config.reconcile = sweep
                if letIndexersDownload { config.indexers = .download }
                let added = try home.addStore(config,
                                           content: allLocal ? .allLocal : onDemand ? .onDemand : nil)
                switch added.remote {
                case .folder(let path) where joining:
                    print("Joined store \(name), shown as \"\(display ?? name)\": the folder remote \(path) is already a store (another device's); "
                          + (added.content == .onDemand ? "what it holds shows at the next mount, each file downloaded when first opened (`docdrive pin` keeps files here)."
                                                        : "what it holds is downloaded at the next mount."))
                case .folder(let path):
                    print("Added store \(name), shown as \"\(display ?? name)\", with the folder remote \(path).")
                case .s3(let s):
                    print("Added store \(name), shown as \"\(display ?? name)\", with the S3 remote \(s.displayName) at \(s.endpoint).")
                    if s.checkedWrites {
                        print("If the server ignores conditional writes, each write checks the object's version with a HEAD first (the weaker mode; see the README).")
                    }
                }
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
                        switch s.remote {
                        case .folder(let p):
                            r["remotePath"] = p
                        case .s3(let s3):
                            r["endpoint"] = s3.endpoint
                            r["bucket"] = s3.bucket
                            r["prefix"] = s3.prefix
                            r["region"] = s3.region
                        }
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

    struct Retry: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Try again a store held offline because the daemon stopped while it worked on it (docdrive status says so).",
            discussion: "A running mount starts the store within a second; otherwise the next mount starts it as usual.")
        @OptionGroup var drive: DriveOptions
        @Argument var name: String

        func run() throws {
            try guarded {
                let home = drive.driveHome
                let config = try home.loadConfig()
                guard config.stores.contains(where: { $0.name == name }) else {
                    throw DriveError(.notFound, "There is no store \(name) (see `docdrive store list`).")
                }
                guard CrashGuard.clear(home, store: name) else {
                    print("Store \(name) is not held offline; nothing to try again.")
                    return
                }
                print("Store \(name) will be tried again: within a second if the drive is mounted, else at the next mount.")
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
