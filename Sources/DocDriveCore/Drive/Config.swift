// Config: the drive's one human-editable file (config.yaml), read with line-precise errors.
import Foundation
import Yams

/// An application container: Documents/ is public when `isPublic`, Data/ never is.
public struct AppConfig: Equatable, Sendable {
    public var id: String
    public var name: String
    public var isPublic: Bool

    public init(id: String, name: String, isPublic: Bool) {
        self.id = id
        self.name = name
        self.isPublic = isPublic
    }
}

/// Where a store's content is kept in the end: the truth other devices share.
public enum RemoteConfig: Equatable, Sendable {
    case folder(path: String)
    case s3(S3Settings)

    public var kind: String {
        switch self {
        case .folder: return "folder"
        case .s3: return "s3"
        }
    }
    public var summary: String {
        switch self {
        case .folder(let path): return "folder \(path)"
        case .s3(let s): return "s3 \(s.displayName) at \(s.endpoint)"
        }
    }
}

/// An S3 remote as config.yaml gives it (never the credentials themselves: they come from the
/// environment, `~/.aws/credentials` or the file `credentialsFile` names).
public struct S3Settings: Equatable, Sendable {
    /// "https://s3.eu-west-1.amazonaws.com", "http://127.0.0.1:8333".
    public var endpoint: String
    public var bucket: String
    /// The folder of the bucket the store lives in ("" for the whole bucket), without slashes
    /// at either end.
    public var prefix: String
    public var region: String
    /// Bucket in the path (http://host/bucket/key) instead of the host name (http://bucket.host/key).
    public var pathStyle: Bool
    /// An AWS-style credentials file (mode 0600) to read instead of the environment.
    public var credentialsFile: String?
    /// Files larger than this go up as multipart uploads in parts of this size.
    public var partSize: Int64
    /// Parts of one file sent at once.
    public var parallelParts: Int
    /// The user accepted a server that ignores conditional writes (`conditional-writes:
    /// checked`): each write is then preceded by a HEAD that checks the version this device
    /// last saw, which leaves a race of one round trip (README, "S3 servers without
    /// conditional writes"). A server that honours them is used as always.
    public var checkedWrites: Bool

    public static let defaultRegion = "us-east-1"
    public static let defaultPartSize: Int64 = 16 << 20
    public static let defaultParallelParts = 4
    /// S3's own limits on a part (except the last, which may be smaller).
    public static let partSizeRange: ClosedRange<Int64> = (5 << 20)...(5 << 30)

    public init(endpoint: String, bucket: String, prefix: String = "", region: String = S3Settings.defaultRegion, pathStyle: Bool = false,
                credentialsFile: String? = nil, partSize: Int64 = S3Settings.defaultPartSize, parallelParts: Int = S3Settings.defaultParallelParts,
                checkedWrites: Bool = false) {
        self.checkedWrites = checkedWrites
        self.endpoint = endpoint
        self.bucket = bucket
        self.prefix = prefix.split(separator: "/", omittingEmptySubsequences: true).joined(separator: "/")
        self.region = region
        self.pathStyle = pathStyle
        self.credentialsFile = credentialsFile
        self.partSize = partSize
        self.parallelParts = parallelParts
    }

    /// "s3://bucket/prefix", for sentences.
    public var displayName: String { "s3://" + bucket + (prefix.isEmpty ? "" : "/" + prefix) }

    /// Whether requests put the bucket in the path: asked for (`path-style`), or the endpoint's
    /// host is an IP address or `localhost`, where the bucket's host name (docs.127.0.0.1) cannot
    /// be resolved (the AWS CLI and rclone do the same for such an endpoint).
    public var usesPathStyle: Bool {
        pathStyle || Self.hostNeedsPathStyle(URL(string: endpoint)?.host ?? "")
    }

    /// An IP address (v4 or v6) or `localhost` (any case, with or without a trailing dot).
    public static func hostNeedsPathStyle(_ host: String) -> Bool {
        var h = host.lowercased()
        if h.hasSuffix(".") { h.removeLast() }
        if h == "localhost" || h.hasSuffix(".localhost") || h.contains(":") || h.hasPrefix("[") { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { p in !p.isEmpty && p.count <= 3 && p.allSatisfy(\.isASCII) && p.allSatisfy(\.isNumber) }
    }

    /// What is wrong with the settings, as one clause, or nil.
    public func problem(store: String) -> String? {
        guard let url = URL(string: endpoint), let scheme = url.scheme, scheme == "http" || scheme == "https", url.host != nil else {
            return "the S3 endpoint of store \(store) must be a URL like https://s3.amazonaws.com or http://127.0.0.1:8333, not \"\(endpoint)\""
        }
        if !url.path.isEmpty && url.path != "/" {
            return "the S3 endpoint of store \(store) must not have a path (\(url.path)); give the bucket with `bucket` and a folder with `prefix`"
        }
        let okBucket = bucket.count >= 3 && bucket.count <= 63 && bucket.utf8.allSatisfy {
            ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z")) || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".")
        }
        if !okBucket {
            return "the bucket of store \(store) must be 3 to 63 lowercase letters, digits, dots and hyphens, not \"\(bucket)\""
        }
        if region.isEmpty || region.contains(where: { $0 == "/" || $0 == " " }) {
            return "the region of store \(store) must be a region name like us-east-1, not \"\(region)\""
        }
        if let f = credentialsFile, !f.hasPrefix("/") {
            return "the credentials file of store \(store) must be an absolute path, not \"\(f)\""
        }
        if !Self.partSizeRange.contains(partSize) {
            return "the part size of store \(store) must be between 5M and 5G, not \(partSize)"
        }
        if !(1...64).contains(parallelParts) {
            return "the parallel parts of store \(store) must be between 1 and 64, not \(parallelParts)"
        }
        return nil
    }
}

/// A provider store: a local cache under the drive home plus a remote.
public struct StoreConfig: Equatable, Sendable {
    public var name: String
    public var displayName: String
    public var remote: RemoteConfig
    /// Seconds between a save and its upload, so that repeated saves become one upload.
    public var writebackDelay: Double
    /// Upload workers of this store: how many files go to its remote at once.
    public var workers: Int
    /// Bytes per second all of the store's uploads together may send; nil is no limit.
    public var bandwidth: Int64?
    /// Seconds between two looks at the remote for other devices' changes.
    public var poll: Double
    /// Seconds within which a whole listing of a remote whose polls see only DocDrive's writes
    /// (S3: the change mark, `Remote.fingerprintSeesEveryWriter`) looks for what other tools
    /// wrote: the longest a foreign write takes to appear.
    public var reconcile: Double = StoreConfig.defaultReconcile
    /// Whether a remote item's content comes down when it is listed (`allLocal`) or when it is
    /// first opened (`onDemand`: until then it is a placeholder, see Sync/Placeholder.swift).
    public var content: ContentMode = .allLocal
    /// The most bytes of downloaded content this device keeps (on-demand stores); nil is no limit.
    public var cacheLimit: Int64? = nil

    /// Whether desktop indexers and thumbnailers may download placeholders (`download`) or are
    /// refused their content (`skip`, the default; see Sync/BackgroundReaders.swift).
    public var indexers: IndexerPolicy = .skip

    /// Whether the next small placeholders of a folder download ahead while a program opens
    /// its files one after another (on-demand stores without a cache limit; Sync/Readahead.swift).
    public var readahead = true

    public enum IndexerPolicy: String, Sendable, Equatable, Codable {
        case skip, download
    }

    public enum ContentMode: String, Sendable, Equatable, Codable {
        case allLocal = "all-local"
        case onDemand = "on-demand"
    }

    public static let defaultWritebackDelay = 2.0
    public static let defaultPoll = 10.0
    public static let pollRange = 0.2...86400.0
    public static let defaultReconcile = 3600.0
    public static let reconcileRange = 1.0...604800.0

    /// Reads a duration such as `90`, `90s`, `30m`, `1h` or `2d` (seconds); nil when the text is
    /// not one.
    public static func parseDuration(_ text: String) -> Double? {
        var t = text.trimmingCharacters(in: .whitespaces).lowercased()
        var unit = 1.0
        if let last = t.last, let u = ["s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0][String(last)] {
            unit = u
            t.removeLast()
        }
        guard let v = Double(t), v.isFinite, v >= 0 else { return nil }
        return v * unit
    }
    public static let defaultWorkers = 4
    public static let workerRange = 1...64

    public init(name: String, displayName: String, remote: RemoteConfig, writebackDelay: Double = StoreConfig.defaultWritebackDelay,
                workers: Int = StoreConfig.defaultWorkers, bandwidth: Int64? = nil, poll: Double = StoreConfig.defaultPoll) {
        self.name = name
        self.poll = poll
        self.displayName = displayName
        self.remote = remote
        self.writebackDelay = writebackDelay
        self.workers = workers
        self.bandwidth = bandwidth
    }

    /// Reads a rate such as `500K`, `10M`, `1G` or plain bytes (binary units, per second);
    /// nil when the text is not one. `0` means no limit.
    public static func parseBandwidth(_ text: String) -> Int64? {
        var t = text.trimmingCharacters(in: .whitespaces).uppercased()
        if t.hasSuffix("/S") { t.removeLast(2) }
        if t.hasSuffix("B") { t.removeLast() }  // "10MB" is "10M", "100B" is 100
        var unit: Int64 = 1
        if let last = t.last, let i = "KMG".firstIndex(of: last) {
            unit = Int64(1) << (10 * ("KMG".distance(from: "KMG".startIndex, to: i) + 1))
            t.removeLast()
        }
        guard let v = Double(t), v >= 0, v.isFinite, v * Double(unit) < 1e15 else { return nil }
        return Int64(v * Double(unit))
    }

    /// Problems of the upload settings, as one clause, or nil.
    func uploadSettingsProblem() -> String? {
        if !Self.workerRange.contains(workers) {
            return "the workers of store \(name) must be between \(Self.workerRange.lowerBound) and \(Self.workerRange.upperBound), not \(workers)"
        }
        if let b = bandwidth, b < 1024 {
            return "the bandwidth of store \(name) must be at least 1K (bytes per second), not \(b)"
        }
        return nil
    }

    /// The key the index and the file system know the store by.
    public var rootKey: String { RootKey.store(name).description }
}

/// Everything in config.yaml.
public struct DriveConfig: Equatable, Sendable {
    public var apps: [AppConfig] = []
    public var stores: [StoreConfig] = []

    public init(apps: [AppConfig] = [], stores: [StoreConfig] = []) {
        self.apps = apps
        self.stores = stores
    }

    /// Display names shown at the mount's top level, in listing order.
    public var topLevelNames: [String] {
        apps.filter(\.isPublic).map(\.name) + stores.map(\.displayName)
    }

    /// Checks the rules that span entries: unique ids and unique top-level names.
    public func validate(file: String = "config") throws(DriveError) {
        var ids = Set<String>(), storeNames = Set<String>(), shown = [String: String]()
        for app in apps {
            if let p = Names.problem(withAppID: app.id) {
                throw DriveError(.invalidName, "\(file): app id \"\(app.id)\" is not valid: \(p).")
            }
            if let p = Names.problem(withDisplayName: app.name) {
                throw DriveError(.invalidName, "\(file): the name \"\(app.name)\" of app \(app.id) is not valid: \(p).")
            }
            guard ids.insert(app.id).inserted else {
                throw DriveError(.invalidConfig, "\(file): app \(app.id) is listed twice.")
            }
            if app.isPublic {
                if let other = shown.updateValue("app \(app.id)", forKey: app.name) {
                    throw DriveError(.invalidConfig, "\(file): app \(app.id) and \(other) both show as \"\(app.name)\"; give one another name.")
                }
            }
        }
        for store in stores {
            if let p = Names.problem(withStoreName: store.name) {
                throw DriveError(.invalidName, "\(file): store name \"\(store.name)\" is not valid: \(p).")
            }
            if let p = Names.problem(withDisplayName: store.displayName) {
                throw DriveError(.invalidName, "\(file): the name \"\(store.displayName)\" of store \(store.name) is not valid: \(p).")
            }
            guard storeNames.insert(store.name).inserted else {
                throw DriveError(.invalidConfig, "\(file): store \(store.name) is listed twice.")
            }
            if let other = shown.updateValue("store \(store.name)", forKey: store.displayName) {
                throw DriveError(.invalidConfig, "\(file): store \(store.name) and \(other) both show as \"\(store.displayName)\"; give one another name.")
            }
            if let p = store.uploadSettingsProblem() {
                throw DriveError(.invalidConfig, "\(file): \(p).")
            }
            switch store.remote {
            case .folder(let path):
                if !path.hasPrefix("/") {
                    throw DriveError(.invalidConfig, "\(file): the folder remote of store \(store.name) must be an absolute path, not \"\(path)\".")
                }
            case .s3(let s3):
                if let p = s3.problem(store: store.name) {
                    throw DriveError(.invalidConfig, "\(file): \(p).")
                }
            }
        }
    }
}

// MARK: - Reading

extension DriveConfig {
    /// Parses YAML text; errors name the file, the line and what is wrong.
    public static func parse(_ text: String, file: String) throws(DriveError) -> DriveConfig {
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch let error as YamlError {
            throw DriveError(.invalidConfig, "\(file): \(Self.describe(error))", underlying: error)
        } catch {
            throw DriveError(.invalidConfig, "\(file): \(error)", underlying: error)
        }
        var config = DriveConfig()
        guard let root else { return config }  // an empty file is an empty drive
        let reader = NodeReader(file: file)
        let top = try reader.mapping(root, "the top level", allowed: ["apps", "stores"])
        if let apps = top["apps"] {
            for node in try reader.sequence(apps, "apps") {
                let m = try reader.mapping(node, "an app", allowed: ["id", "name", "public"])
                let id = try reader.string(m, "id", in: node, what: "an app")
                config.apps.append(AppConfig(
                    id: id,
                    name: try reader.optionalString(m, "name") ?? id,
                    isPublic: try reader.optionalBool(m, "public") ?? false))
            }
        }
        if let stores = top["stores"] {
            for node in try reader.sequence(stores, "stores") {
                let m = try reader.mapping(node, "a store", allowed: ["name", "display", "remote", "writeback", "workers", "bandwidth", "poll",
                                                                          "reconcile", "content", "cache-limit", "indexers", "readahead"])
                let name = try reader.string(m, "name", in: node, what: "a store")
                guard let remoteNode = m["remote"] else {
                    throw reader.error(node, "store \(name) has no remote (add `remote: {type: folder, path: /some/folder}`)")
                }
                let r = try reader.mapping(remoteNode, "the remote of store \(name)",
                                           allowed: ["type", "path", "endpoint", "bucket", "prefix", "region", "path-style",
                                                     "credentials-file", "part-size", "parallel-parts", "conditional-writes"])
                let type = try reader.string(r, "type", in: remoteNode, what: "the remote of store \(name)")
                let remote: RemoteConfig
                switch type {
                case "folder":
                    remote = .folder(path: try reader.string(r, "path", in: remoteNode, what: "the folder remote of store \(name)"))
                case "s3":
                    let what = "the s3 remote of store \(name)"
                    var partSize = S3Settings.defaultPartSize
                    if let node = r["part-size"] {
                        guard case .scalar(let sc) = node, let b = StoreConfig.parseBandwidth(sc.string), S3Settings.partSizeRange.contains(b) else {
                            throw reader.error(node, "the part-size of store \(name) must be a size between 5M and 5G, like 16M")
                        }
                        partSize = b
                    }
                    var checked = false
                    if let node = r["conditional-writes"] {
                        guard case .scalar(let sc) = node, ["required", "checked"].contains(sc.string) else {
                            throw reader.error(node, "the conditional-writes of store \(name) must be \"required\" (the default) or \"checked\" (a server that ignores them; see the README)")
                        }
                        checked = sc.string == "checked"
                    }
                    let settings = S3Settings(
                        endpoint: try reader.string(r, "endpoint", in: remoteNode, what: what),
                        bucket: try reader.string(r, "bucket", in: remoteNode, what: what),
                        prefix: try reader.optionalString(r, "prefix") ?? "",
                        region: try reader.optionalString(r, "region") ?? S3Settings.defaultRegion,
                        pathStyle: try reader.optionalBool(r, "path-style") ?? false,
                        credentialsFile: try reader.optionalString(r, "credentials-file"),
                        partSize: partSize,
                        parallelParts: try reader.optionalInt(r, "parallel-parts") ?? S3Settings.defaultParallelParts,
                        checkedWrites: checked)
                    if let p = settings.problem(store: name) { throw reader.error(remoteNode, p) }
                    remote = .s3(settings)
                default:
                    throw reader.error(r["type"] ?? remoteNode, "store \(name) has remote type \"\(type)\"; the supported types are \"folder\" and \"s3\"")
                }
                let delay = try reader.optionalDouble(m, "writeback") ?? StoreConfig.defaultWritebackDelay
                guard delay >= 0 && delay <= 3600 else {
                    throw reader.error(m["writeback"]!, "the writeback delay of store \(name) must be between 0 and 3600 seconds")
                }
                let workers = try reader.optionalInt(m, "workers") ?? StoreConfig.defaultWorkers
                guard StoreConfig.workerRange.contains(workers) else {
                    throw reader.error(m["workers"]!, "the workers of store \(name) must be between \(StoreConfig.workerRange.lowerBound) and \(StoreConfig.workerRange.upperBound), not \(workers)")
                }
                var bandwidth: Int64?
                if let node = m["bandwidth"] {
                    guard case .scalar(let sc) = node, let b = StoreConfig.parseBandwidth(sc.string) else {
                        throw reader.error(node, "the bandwidth of store \(name) must be bytes per second, like 500K or 10M")
                    }
                    guard b == 0 || b >= 1024 else {
                        throw reader.error(node, "the bandwidth of store \(name) must be at least 1K (bytes per second), or 0 for no limit")
                    }
                    bandwidth = b == 0 ? nil : b
                }
                let poll = try reader.optionalDouble(m, "poll") ?? StoreConfig.defaultPoll
                guard StoreConfig.pollRange.contains(poll) else {
                    throw reader.error(m["poll"]!, "the poll interval of store \(name) must be between 0.2 and 86400 seconds, not \(poll)")
                }
                var store = StoreConfig(
                    name: name, displayName: try reader.optionalString(m, "display") ?? name, remote: remote, writebackDelay: delay,
                    workers: workers, bandwidth: bandwidth, poll: poll)
                if let node = m["reconcile"] {
                    guard case .scalar(let sc) = node, let r = StoreConfig.parseDuration(sc.string) else {
                        throw reader.error(node, "the reconcile time of store \(name) must be a duration, like 1h, 30m or 90s")
                    }
                    guard StoreConfig.reconcileRange.contains(r) else {
                        throw reader.error(node, "the reconcile time of store \(name) must be between 1 second and 7 days (7d), not \(sc.string)")
                    }
                    store.reconcile = r
                }
                if let node = m["content"] {
                    guard case .scalar(let sc) = node, let mode = StoreConfig.ContentMode(rawValue: sc.string) else {
                        throw reader.error(node, "the content of store \(name) must be \"on-demand\" (downloaded when opened) or \"all-local\" (downloaded when listed)")
                    }
                    store.content = mode
                }
                if let node = m["cache-limit"] {
                    guard case .scalar(let sc) = node, let b = StoreConfig.parseBandwidth(sc.string), b == 0 || b >= 1 << 20 else {
                        throw reader.error(node, "the cache-limit of store \(name) must be a size of at least 1M, like 20G, or 0 for no limit")
                    }
                    store.cacheLimit = b == 0 ? nil : b
                }
                if let node = m["indexers"] {
                    guard case .scalar(let sc) = node, let policy = StoreConfig.IndexerPolicy(rawValue: sc.string) else {
                        throw reader.error(node, "the indexers of store \(name) must be \"skip\" (desktop indexers and thumbnailers do not download placeholders) or \"download\"")
                    }
                    store.indexers = policy
                }
                if let node = m["readahead"] {
                    guard case .scalar(let sc) = node, ["on", "off"].contains(sc.string) else {
                        throw reader.error(node, "the readahead of store \(name) must be \"on\" (the next small files of a folder read one after another download ahead) or \"off\"")
                    }
                    store.readahead = sc.string == "on"
                }
                config.stores.append(store)
            }
        }
        try config.validate(file: file)
        return config
    }

    static func describe(_ error: YamlError) -> String {
        switch error {
        case .scanner(_, let problem, let mark, _), .parser(_, let problem, let mark, _), .composer(_, let problem, let mark, _):
            return "line \(mark.line), column \(mark.column): \(problem)."
        case .reader(let problem, _, _, _):
            return "\(problem)."
        default:
            return "\(error)"
        }
    }
}

/// Walks a composed YAML tree, turning every mismatch into "FILE: line N: what".
private struct NodeReader {
    let file: String

    func error(_ node: Node, _ message: String) -> DriveError {
        if let mark = node.mark {
            return DriveError(.invalidConfig, "\(file): line \(mark.line): \(message).")
        }
        return DriveError(.invalidConfig, "\(file): \(message).")
    }

    func mapping(_ node: Node, _ what: String, allowed: Set<String>) throws(DriveError) -> [String: Node] {
        guard let mapping = node.mapping else { throw error(node, "\(what) must be a mapping of keys to values") }
        var result = [String: Node]()
        for (key, value) in mapping {
            guard let k = key.string else { throw error(key, "a key in \(what) is not text") }
            guard allowed.contains(k) else {
                throw error(key, "unknown key \"\(k)\" in \(what) (known: \(allowed.sorted().joined(separator: ", ")))")
            }
            result[k] = value
        }
        return result
    }

    func sequence(_ node: Node, _ what: String) throws(DriveError) -> [Node] {
        if case .scalar(let s) = node, s.string.isEmpty || s.string == "~" || s.string == "null" { return [] }
        guard let seq = node.sequence else { throw error(node, "\(what) must be a list (lines starting with \"- \")") }
        return Array(seq)
    }

    func string(_ m: [String: Node], _ key: String, in node: Node, what: String) throws(DriveError) -> String {
        guard let value = try optionalString(m, key) else { throw error(node, "\(what) has no \"\(key)\"") }
        return value
    }

    func optionalString(_ m: [String: Node], _ key: String) throws(DriveError) -> String? {
        guard let node = m[key] else { return nil }
        guard case .scalar(let s) = node else { throw error(node, "\"\(key)\" must be text") }
        return s.string
    }

    func optionalDouble(_ m: [String: Node], _ key: String) throws(DriveError) -> Double? {
        guard let node = m[key] else { return nil }
        guard let d = node.float ?? node.int.map(Double.init) else { throw error(node, "\"\(key)\" must be a number of seconds") }
        return d
    }

    func optionalInt(_ m: [String: Node], _ key: String) throws(DriveError) -> Int? {
        guard let node = m[key] else { return nil }
        // Yams reads "1:30" as a number in base 60 and traps when it overflows: refused first.
        if case .scalar(let s) = node, s.string.contains(":") { throw error(node, "\"\(key)\" must be a whole number") }
        guard let i = node.int else { throw error(node, "\"\(key)\" must be a whole number") }
        return i
    }

    func optionalBool(_ m: [String: Node], _ key: String) throws(DriveError) -> Bool? {
        guard let node = m[key] else { return nil }
        guard let b = node.bool else { throw error(node, "\"\(key)\" must be true or false") }
        return b
    }
}

// MARK: - Writing

extension DriveConfig {
    /// YAML text for the file, with a header that says how to edit it.
    public func yaml() -> String {
        var out = """
        # DocDrive configuration. Edit by hand or with `docdrive app ...` and
        # `docdrive store ...`; a running mount picks changes up within a second.
        #
        # apps:    application containers. `public: true` shows Documents/ at the top
        #          of the mount under `name`; Data/ is always private.
        # stores:  provider stores, shown under `display`; each keeps a local copy
        #          under the drive home and has a remote (type: folder, path: ...;
        #          or type: s3, endpoint: URL, bucket: B, prefix: P, region: R,
        #          path-style: true, credentials-file: /path (mode 0600),
        #          part-size: 16M, parallel-parts: 4, conditional-writes:
        #          checked for a server that ignores If-Match, see the README);
        #          `writeback` is the seconds between a save and its upload,
        #          `workers` how many files upload at once (1-64, default 4),
        #          `bandwidth` an optional limit in bytes per second (500K, 10M),
        #          `content` on-demand (placeholders, downloaded when opened) or
        #          all-local (the default), `cache-limit` the most bytes an
        #          on-demand store keeps downloaded (20G; 0 or absent: no limit),
        #          `indexers` skip (the default: desktop indexers and thumbnailers
        #          are refused a placeholder's content) or download, `readahead`
        #          on (the default: while a program opens a folder's files one
        #          after another, its next small placeholders download ahead) or off,
        #          `reconcile` how soon (S3) what another tool wrote is seen (1h, 10m).

        """
        out += "apps:\n"
        if apps.isEmpty { out += "  []\n" }
        for app in apps {
            out += "  - id: \(Self.quote(app.id))\n    name: \(Self.quote(app.name))\n    public: \(app.isPublic)\n"
        }
        out += "stores:\n"
        if stores.isEmpty { out += "  []\n" }
        for store in stores {
            out += "  - name: \(Self.quote(store.name))\n    display: \(Self.quote(store.displayName))\n"
            out += "    writeback: \(store.writebackDelay)\n"
            out += "    workers: \(store.workers)\n"
            if let b = store.bandwidth { out += "    bandwidth: \(b)\n" }
            if store.poll != StoreConfig.defaultPoll { out += "    poll: \(store.poll)\n" }
            if store.reconcile != StoreConfig.defaultReconcile { out += "    reconcile: \(store.reconcile)\n" }
            if store.content != .allLocal { out += "    content: \(store.content.rawValue)\n" }
            if let l = store.cacheLimit { out += "    cache-limit: \(l)\n" }
            if store.indexers != .skip { out += "    indexers: \(store.indexers.rawValue)\n" }
            if !store.readahead { out += "    readahead: off\n" }
            switch store.remote {
            case .folder(let path):
                out += "    remote:\n      type: folder\n      path: \(Self.quote(path))\n"
            case .s3(let s):
                out += "    remote:\n      type: s3\n      endpoint: \(Self.quote(s.endpoint))\n      bucket: \(Self.quote(s.bucket))\n"
                if !s.prefix.isEmpty { out += "      prefix: \(Self.quote(s.prefix))\n" }
                out += "      region: \(Self.quote(s.region))\n"
                if s.pathStyle { out += "      path-style: true\n" }
                if let f = s.credentialsFile { out += "      credentials-file: \(Self.quote(f))\n" }
                if s.partSize != S3Settings.defaultPartSize { out += "      part-size: \(s.partSize)\n" }
                if s.parallelParts != S3Settings.defaultParallelParts { out += "      parallel-parts: \(s.parallelParts)\n" }
                if s.checkedWrites { out += "      conditional-writes: checked\n" }
            }
        }
        return out
    }

    /// A YAML double-quoted scalar (JSON string escaping is valid YAML).
    static func quote(_ s: String) -> String {
        var r = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": r += "\\\""
            case "\\": r += "\\\\"
            case "\n": r += "\\n"
            case "\t": r += "\\t"
            default:
                if u.value < 0x20 || u.value == 0x7f {
                    r += String(format: "\\x%02X", u.value)
                } else {
                    r.unicodeScalars.append(u)
                }
            }
        }
        return r + "\""
    }
}
