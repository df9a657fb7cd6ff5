// Namespace: what the mount's top level and `.by-app` show, from the config, reloaded when it changes.
import CDocDriveSys
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The drive's top level, derived from the config. Reloaded when config.yaml changes on disk,
/// so `docdrive app add` shows in a running mount within the entry timeout.
final class Namespace: Sendable {
    struct Layout: Sendable {
        var config: DriveConfig
        /// Top-level display name -> backing root (public apps' Documents and stores).
        var topLevel: [String: BackingRoot]
        var topLevelOrder: [String]
        /// App id -> its three folders.
        var appFolders: [String: [String: BackingRoot]]
    }

    static let appFolderNames = ["Documents", "Data", "Inbox"]

    let home: DriveHome
    private let layout: Mutex<Layout>
    /// BackingRoot objects by key, kept across reloads so live inodes keep theirs.
    private let roots = Mutex<[String: BackingRoot]>([:])
    /// The drive's one watch of config.yaml, asked whenever the layout is read.
    private let configWatch: ConfigWatch

    init(home: DriveHome, config: DriveConfig, configWatch: ConfigWatch) {
        self.home = home
        self.configWatch = configWatch
        self.layout = Mutex(Layout(config: config, topLevel: [:], topLevelOrder: [], appFolders: [:]))
        let l = build(config)
        layout.withLock { $0 = l }
    }

    private func root(_ key: String, _ path: String) -> BackingRoot {
        roots.withLock { r in
            if let existing = r[key], existing.path == path { return existing }
            let b = BackingRoot(key: key, path: path)
            r[key] = b
            return b
        }
    }

    private func build(_ config: DriveConfig) -> Layout {
        var top = [String: BackingRoot](), order = [String](), apps = [String: [String: BackingRoot]]()
        for app in config.apps {
            var folders = [String: BackingRoot]()
            for f in Self.appFolderNames {
                folders[f] = root(RootKey.app(id: app.id, folder: f).description, home.containerPath(app.id) + "/" + f)
            }
            apps[app.id] = folders
            if app.isPublic {
                top[app.name] = folders["Documents"]
                order.append(app.name)
            }
        }
        for store in config.stores {
            top[store.displayName] = root(store.rootKey, home.cachePath(store.name))
            order.append(store.displayName)
        }
        return Layout(config: config, topLevel: top, topLevelOrder: order, appFolders: apps)
    }

    /// The current layout, config.yaml looked at first (ConfigWatch: at most every 0.5 s). A
    /// config that no longer parses keeps the last good layout.
    func current() -> Layout {
        configWatch.check()
        return layout.withLock { $0 }
    }

    /// The backing root with this key in the current layout ("store:NAME", "app:ID:Folder").
    func root(key: String) -> BackingRoot? {
        let l = current()
        if let r = l.topLevel.values.first(where: { $0.key == key }) { return r }
        for folders in l.appFolders.values {
            if let r = folders.values.first(where: { $0.key == key }) { return r }
        }
        return nil
    }

    /// Where a path inside a root shows in the mount, relative to the mount root: a store's
    /// or public app's items under its display name, anything else under `.by-app/ID/Folder`.
    func displayPath(rootKey: String, _ rel: String) -> String {
        let top = RootKey(rootKey)?.shown(in: current().config)
        let base = top ?? rootKey
        return rel.isEmpty ? base : base + "/" + rel
    }
}

extension Namespace: DriveChangeSubscriber {
    public var follows: DriveChangeKinds { .config }

    public func changed(_ change: DriveChange) {
        if case let .config(config, _) = change { configChanged(config) }
    }

    /// A new config: its folders made, the layout built again (live nodes keep their roots).
    func configChanged(_ config: DriveConfig) {
        try? home.prepareFolders(for: config)
        let l = build(config)
        layout.withLock { $0 = l }
    }
}
