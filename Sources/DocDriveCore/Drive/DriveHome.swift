// DriveHome: the drive's folder on disk (config, index, key, containers, store caches, run state).
import Foundation
import SystemPackage

/// Layout of `$DOCDRIVE_HOME` (default `~/.local/share/docdrive`):
/// ```
/// config.yaml           the configuration
/// index.sqlite          the index (items, ids)
/// secret.key            the per-drive key (0600)
/// device.json           this device's id and name (see DeviceIdentity)
/// containers/ID/        Documents/, Data/, Inbox/ of each app
/// stores/NAME/cache/    each store's local copy
/// run/                  daemon.log, mount.json, lock
/// ```
public struct DriveHome: Sendable {
    public let path: String

    public init(path: String) {
        self.path = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    /// `$DOCDRIVE_HOME`, or `$XDG_DATA_HOME/docdrive`, or `~/.local/share/docdrive`.
    public static func fromEnvironment(_ env: [String: String] = Tunables.processEnvironment) -> DriveHome {
        if let h = env["DOCDRIVE_HOME"], !h.isEmpty { return DriveHome(path: absolute(h)) }
        if let x = env["XDG_DATA_HOME"], !x.isEmpty { return DriveHome(path: absolute(x) + "/docdrive") }
        let home = env["HOME"] ?? NSHomeDirectory()
        return DriveHome(path: home + "/.local/share/docdrive")
    }

    public static func absolute(_ p: String) -> String {
        if p.hasPrefix("/") { return p }
        return FileManager.default.currentDirectoryPath + "/" + p
    }

    public var configPath: String { path + "/config.yaml" }
    public var indexPath: String { path + "/index.sqlite" }
    public var keyPath: String { path + "/secret.key" }
    public var runPath: String { path + "/run" }
    public var logPath: String { runPath + "/daemon.log" }
    public var mountInfoPath: String { runPath + "/mount.json" }
    public var lockPath: String { runPath + "/lock" }

    public func containerPath(_ appID: String) -> String { path + "/containers/" + appID }
    public func documentsPath(_ appID: String) -> String { containerPath(appID) + "/Documents" }
    public func dataPath(_ appID: String) -> String { containerPath(appID) + "/Data" }
    public func inboxPath(_ appID: String) -> String { containerPath(appID) + "/Inbox" }
    public func storePath(_ name: String) -> String { path + "/stores/" + name }
    public func cachePath(_ store: String) -> String { storePath(store) + "/cache" }

    public var isInitialized: Bool { FileManager.default.fileExists(atPath: configPath) }

    // MARK: config

    /// The config, checked. `checkingRemotes: false` skips where the remotes are (RemoteChecks):
    /// for a change that is checked whole afterwards (a `store remove` must be able to take a
    /// misplaced store out).
    public func loadConfig(checkingRemotes: Bool = true) throws(DriveError) -> DriveConfig {
        guard isInitialized else {
            throw DriveError(.notInitialized, "No drive at \(path): run `docdrive init` first (or set DOCDRIVE_HOME).")
        }
        let text: String
        do {
            text = try String(contentsOfFile: configPath, encoding: .utf8)
        } catch {
            throw DriveError(.invalidConfig, "\(configPath): cannot be read as UTF-8 text (\(error.localizedDescription)).", underlying: error)
        }
        let config = try DriveConfig.parse(text, file: configPath)
        if checkingRemotes { try checkRemotes(config, file: configPath) }
        return config
    }

    /// Writes the config atomically (temporary file, fsync, rename), so a crash leaves the old or the new file.
    public func saveConfig(_ config: DriveConfig) throws(DriveError) {
        try config.validate(file: configPath)
        try Self.writeAtomically(config.yaml(), to: configPath, mode: 0o644)
    }

    static func writeAtomically(_ text: String, to path: String, mode: mode_t) throws(DriveError) {
        let tmp = path + ".tmp-\(getpid())"
        do {
            let fd = try FileDescriptor.open(FilePath(tmp), .writeOnly, options: [.create, .truncate], permissions: FilePermissions(rawValue: mode))
            try fd.closeAfter {
                _ = try fd.writeAll(Array(text.utf8))
                if Glibc.fsync(fd.rawValue) != 0 { throw Errno(rawValue: errno) }
            }
            try Self.rename(tmp, path)
        } catch let e as Errno {
            unlink(tmp)
            throw DriveError.io("cannot write \(path)", e)
        } catch {
            unlink(tmp)
            throw DriveError(.io, "cannot write \(path): \(error).", underlying: error)
        }
    }

    static func rename(_ from: String, _ to: String) throws(Errno) {
        if Glibc.rename(from, to) != 0 { throw Errno(rawValue: errno) }
    }

    // MARK: creating

    /// Creates the folders the config names (idempotent); returns nothing, throws a sentence.
    public func prepareFolders(for config: DriveConfig) throws(DriveError) {
        try Self.makeDirectory(path, mode: 0o700)
        try Self.makeDirectory(runPath, mode: 0o700)
        try Self.makeDirectory(path + "/containers", mode: 0o755)
        try Self.makeDirectory(path + "/stores", mode: 0o755)
        for app in config.apps {
            try Self.makeDirectory(containerPath(app.id), mode: 0o755)
            for sub in [documentsPath(app.id), dataPath(app.id), inboxPath(app.id)] {
                try Self.makeDirectory(sub, mode: 0o755)
            }
        }
        for store in config.stores {
            try Self.makeDirectory(storePath(store.name), mode: 0o755)
            try Self.makeDirectory(cachePath(store.name), mode: 0o755)
        }
    }

    /// A folder (and its parents), for files the drive writes elsewhere (a systemd unit).
    public static func makeFolder(_ p: String) throws(DriveError) { try makeDirectory(p, mode: 0o755) }

    /// A text file written atomically, mode 0644 (a systemd unit).
    public static func write(_ text: String, to path: String) throws(DriveError) {
        try writeAtomically(text, to: path, mode: 0o644)
    }

    static func makeDirectory(_ p: String, mode: mode_t) throws(DriveError) {
        do {
            try FileManager.default.createDirectory(atPath: p, withIntermediateDirectories: true, attributes: [.posixPermissions: Int(mode)])
        } catch {
            var isDir: ObjCBool = false
            if FileManager.default.fileExists(atPath: p, isDirectory: &isDir), isDir.boolValue { return }
            throw DriveError(.io, "cannot create the folder \(p): \((error as NSError).localizedDescription).", underlying: error)
        }
    }

    /// Creates a new drive: folders, an empty (or default) config and the secret key.
    public func initialize(with config: DriveConfig) throws(DriveError) {
        if isInitialized {
            throw DriveError(.alreadyExists, "A drive already exists at \(path) (its config is \(configPath)).")
        }
        try prepareFolders(for: config)
        try createKeyIfMissing()
        _ = try device()
        try saveConfig(config)
    }

    /// 32 random bytes, mode 0600: signs references and bookmarks.
    public func createKeyIfMissing() throws(DriveError) {
        if FileManager.default.fileExists(atPath: keyPath) { return }
        var bytes = [UInt8](repeating: 0, count: 32)
        var rng = SystemRandomNumberGenerator()
        for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255, using: &rng) }
        let hex = Hex.encode(bytes)
        try Self.writeAtomically(hex + "\n", to: keyPath, mode: 0o600)
    }

    /// The embedded default: one public app ("Notes") and one folder store ("Archive")
    /// whose remote is a folder beside the drive home.
    public func defaultConfig() -> DriveConfig {
        DriveConfig(
            apps: [AppConfig(id: "org.docdrive.notes", name: "Notes", isPublic: true)],
            stores: [StoreConfig(name: "archive", displayName: "Archive", remote: .folder(path: path + "/remotes/archive"))])
    }

    /// Writes a first document so the default drive shows something real.
    public func seedDefaultContent(_ config: DriveConfig) throws(DriveError) {
        for store in config.stores {
            if case .folder(let p) = store.remote {
                try Self.makeDirectory(p, mode: 0o755)
                try DriveError.fromRemote { () throws(RemoteError) in try FolderRemote(root: p).writeMarker(store: store.name) }
            }
        }
        guard let app = config.apps.first else { return }
        let welcome = documentsPath(app.id) + "/Welcome.md"
        if FileManager.default.fileExists(atPath: welcome) { return }
        let text = """
        # Welcome to DocDrive

        This folder is the public Documents folder of the app "\(app.name)".
        Every public app container and every store appears at the top of the
        drive. Use it with any file manager, editor or shell tool.

        The configuration is in \(configPath).

        """
        try Self.writeAtomically(text, to: welcome, mode: 0o644)
    }
}

#if canImport(Glibc)
import Glibc
#endif
