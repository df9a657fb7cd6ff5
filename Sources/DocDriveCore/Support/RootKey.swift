// RootKey: which backing root an item lives in, a store or one folder of an app's container.
// The index, the upload queue and the query index keep it as text ("store:NAME", "app:ID:Folder");
// that text is made and read here only.

public enum RootKey: Hashable, Sendable, CustomStringConvertible {
    /// A store's local copy, by the store's name.
    case store(String)
    /// One folder (Documents, Data, Inbox) of an app's container.
    case app(id: String, folder: String)

    /// The key a text holds, nil for a text no root has.
    public init?(_ text: String) {
        if text.hasPrefix("store:") {
            let name = text.dropFirst(6)
            guard !name.isEmpty else { return nil }
            self = .store(String(name))
            return
        }
        let parts = text.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "app", !parts[1].isEmpty, !parts[2].isEmpty else { return nil }
        self = .app(id: String(parts[1]), folder: String(parts[2]))
    }

    public var description: String {
        switch self {
        case .store(let name): "store:" + name
        case let .app(id, folder): "app:" + id + ":" + folder
        }
    }

    /// The store's name, nil for an app's folder.
    public var storeName: String? {
        if case .store(let name) = self { return name }
        return nil
    }

    /// The app's id, nil for a store.
    public var appID: String? {
        if case .app(let id, _) = self { return id }
        return nil
    }

    /// Whether a text is a store's key (the check of the request path: no parse, no allocation).
    @inline(__always)
    public static func isStore(_ text: String) -> Bool { text.hasPrefix("store:") }

    /// Whether a text is an app folder's key.
    @inline(__always)
    public static func isApp(_ text: String) -> Bool { text.hasPrefix("app:") }

    /// The bounds of every key of an app's folders, for a range query on the text (";" follows
    /// ":"): `key >= lower AND key < upper`.
    public static func appRange(_ id: String) -> [String] { ["app:" + id + ":", "app:" + id + ";"] }

    /// Where this root shows in the mount, relative to its root: a store under its display name,
    /// a public app's Documents under the app's name, any other app folder under
    /// `.by-app/ID/Folder`; nil for a store the config does not have.
    public func shown(in config: DriveConfig) -> String? {
        switch self {
        case .store(let name):
            return config.stores.first { $0.name == name }?.displayName
        case let .app(id, folder):
            if folder == "Documents", let app = config.apps.first(where: { $0.id == id }), app.isPublic { return app.name }
            return ".by-app/" + id + "/" + folder
        }
    }
}

extension BackingRoot {
    /// Whether this root is a store's local copy (its files are synced).
    @inline(__always)
    public var isStore: Bool { RootKey.isStore(key) }
}
