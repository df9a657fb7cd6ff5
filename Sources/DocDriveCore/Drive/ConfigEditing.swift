// ConfigEditing: the changes `docdrive app|store add|remove` make to config.yaml, one locked read-modify-write each.
import CDocDriveSys
import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension DriveHome {
    /// Reads the config, lets `body` change it, validates and writes it back, holding
    /// `config.lock` so that two commands at once cannot lose each other's change.
    public func updateConfig(_ body: (inout DriveConfig) throws(DriveError) -> Void) throws(DriveError) {
        let lockPath = path + "/config.lock"
        let fd = open(lockPath, O_RDWR | O_CREAT | dd_O_CLOEXEC, 0o600)
        if fd >= 0 { flock(fd, LOCK_EX) }
        defer { if fd >= 0 { close(fd) } }
        var config = try loadConfig(checkingRemotes: false)
        try body(&config)
        try config.validate(file: "the changed config")
        try checkRemotes(config, file: "the changed config")
        try prepareFolders(for: config)
        try saveConfig(config)
    }

    public func addApp(_ app: AppConfig) throws(DriveError) {
        if let p = Names.problem(withAppID: app.id) {
            throw DriveError(.invalidName, "The app id \"\(app.id)\" is not valid: \(p).")
        }
        try updateConfig { (c: inout DriveConfig) throws(DriveError) in
            if c.apps.contains(where: { $0.id == app.id }) {
                throw DriveError(.alreadyExists, "The app \(app.id) already exists.")
            }
            c.apps.append(app)
        }
    }

    /// Adds a store; a folder remote that does not exist yet is created. The folder is kept with
    /// its symlinks resolved (uploads never follow one), and it is checked against the drive
    /// home and the other stores (RemoteChecks) before anything is created or written in it.
    /// Returns the store as it was added.
    /// `content`: the store's content mode; nil chooses: on demand when the remote already holds
    /// documents (a store joined from another device, a bucket with content), else all local.
    @discardableResult
    public func addStore(_ store: StoreConfig, content: StoreConfig.ContentMode? = .allLocal) throws(DriveError) -> StoreConfig {
        if let p = Names.problem(withStoreName: store.name) {
            throw DriveError(.invalidName, "The store name \"\(store.name)\" is not valid: \(p).")
        }
        if let p = store.uploadSettingsProblem() {
            throw DriveError(.invalidConfig, p.prefix(1).uppercased() + p.dropFirst() + ".")
        }
        var store = store
        if case .folder(let given) = store.remote {
            guard given.hasPrefix("/") else {
                throw DriveError(.invalidConfig, "The remote folder \(given) must be an absolute path (it is kept in the config, which is read from anywhere).")
            }
            let path = Self.resolved(given)
            store.remote = .folder(path: path)
            var candidate = try loadConfig(checkingRemotes: false)
            if !candidate.stores.contains(where: { $0.name == store.name }) {
                candidate.stores.append(store)
                try checkRemotes(candidate, file: "store add")
            }
            var isDir: ObjCBool = false
            if !FileManager.default.fileExists(atPath: path, isDirectory: &isDir) {
                do {
                    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
                } catch {
                    throw DriveError(.io, "The remote folder \(path) does not exist and cannot be created: \((error as NSError).localizedDescription).")
                }
            } else if !isDir.boolValue {
                throw DriveError(.invalidConfig, "The remote \(path) is not a folder.")
            }
        }
        var s3: S3Remote?
        if case .s3(let settings) = store.remote {
            // The bucket must answer, and honour conditional writes, before the store exists.
            let tag = try device().tag
            let remote = try DriveError.fromRemote { () throws(RemoteError) in
                let remote = try S3Remote(settings: settings, device: tag)
                try remote.checkBucket()
                try remote.probeConditionalWrites()
                return remote
            }
            s3 = remote
        }
        if let content {
            store.content = content
        } else {
            var holds = false
            switch store.remote {
            case .folder(let path):
                holds = ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).contains { !$0.hasPrefix(".docdrive") }
            case .s3:
                holds = (try? s3?.holdsDocuments()) ?? false
            }
            store.content = holds ? .onDemand : .allLocal
        }
        let added = store
        try updateConfig { (c: inout DriveConfig) throws(DriveError) in
            if c.stores.contains(where: { $0.name == added.name }) {
                throw DriveError(.alreadyExists, "The store \(added.name) already exists.")
            }
            c.stores.append(added)
        }
        if case .folder(let path) = store.remote {
            // A folder another device made a store of is joined as it is: its marker stays the
            // same file (every device locks it for conditional writes).
            var st = stat()
            if lstat(path + "/" + FolderRemote.markerName, &st) != 0 || st.st_mode & S_IFMT != S_IFREG {
                try DriveError.fromRemote { () throws(RemoteError) in try FolderRemote(root: path).writeMarker(store: store.name) }
            }
        }
        if let s3 { try DriveError.fromRemote { () throws(RemoteError) in try s3.writeMarker(store: store.name) } }
        return store
    }

    /// Removes the app from the config; its folder is deleted only when asked.
    public func removeApp(id: String, deleteFiles: Bool) throws(DriveError) {
        try updateConfig { (c: inout DriveConfig) throws(DriveError) in
            guard let i = c.apps.firstIndex(where: { $0.id == id }) else {
                throw DriveError(.notFound, "There is no app \(id) (see `docdrive app list`).")
            }
            c.apps.remove(at: i)
        }
        if deleteFiles { try removeTree(containerPath(id)) }
    }

    /// Removes the store from the config; its local copy is deleted only when asked, its remote never.
    public func removeStore(name: String, deleteCache: Bool) throws(DriveError) {
        try updateConfig { (c: inout DriveConfig) throws(DriveError) in
            guard let i = c.stores.firstIndex(where: { $0.name == name }) else {
                throw DriveError(.notFound, "There is no store \(name) (see `docdrive store list`).")
            }
            c.stores.remove(at: i)
        }
        if deleteCache { try removeTree(storePath(name)) }
    }

    private func removeTree(_ p: String) throws(DriveError) {
        guard FileManager.default.fileExists(atPath: p) else { return }
        do {
            try FileManager.default.removeItem(atPath: p)
        } catch {
            throw DriveError(.io, "It is removed from the config, but \(p) could not be deleted: \((error as NSError).localizedDescription).", underlying: error)
        }
    }
}
