// ControlProtocol: the messages of the control socket, shared by the daemon and the commands:
// one request type with a case per command, a typed answer per command, one error answer, and
// the protocol's version, carried in every request and every answer.
import DocDriveWire
import Foundation

/// The wire format: one JSON object per line, a request's fields beside its command.
///
///     {"version":3,"command":"app-close","app":"org.example.notes"}
///     {"version":3,"ok":true,"result":{"app":"org.example.notes","removed":2}}
///     {"version":3,"ok":false,"code":"notFound","error":"There is no app \"x\" (see `docdrive app list`)."}
///
/// Version 1 was the dictionaries before these types; it had no "version" field, so a message
/// without one is version 1. Version 3 answers `status` with one `DriveStatus`, where version 2
/// had `references` and `index-error` and the daemon's run/uploads.json. A daemon and a command
/// of different versions do nothing but say so.
///
/// Bump the version when a message changes incompatibly: a field renamed, removed or made
/// necessary, a command removed or answered differently. A new command alone is no bump: a
/// daemon before it answers `badRequest` ("Unknown request"), every other command of both still
/// works, and the command that sent it can say so and do without (`status-watch`, added in 3:
/// `docdrive status --watch` then asks `status` every half second, and says so).
public enum ControlProtocol {
    /// Kept in DocDriveWire, which the `docdrive` front shares.
    public static let version = QueryWire.protocolVersion
    /// The longest request line the daemon reads (a bookmark token is at most 8 KiB).
    public static let maxRequest = 64 * 1024

    /// The one sentence for two versions that cannot talk, from the command's side (the user
    /// runs the command, whichever side noticed).
    public static func mismatch(command: Int, daemon: Int) -> String {
        "This docdrive speaks control protocol \(command) but the mounted daemon speaks \(daemon); "
            + (command > daemon ? "remount the drive after upgrading." : "use the docdrive that mounted the drive, or remount it with this one.")
    }
}

/// A request to the daemon. Each case's fields are a struct of the same name; those a command
/// sends with `ControlClient.call` name their answer (`ControlCommand`).
public enum ControlRequest: Equatable, Sendable {
    case open(Open)
    case importDocument(Import)
    case move(Move)
    case export(Export)
    case bookmarkCreate(BookmarkCreate)
    case bookmarkResolve(BookmarkResolve)
    case grantsList(GrantsList)
    case grantsRevoke(GrantsRevoke)
    case appClose(AppClose)
    case status(Status)
    /// The status now, then a new one (`DriveStatus`) each time something it shows changes,
    /// until the command goes.
    case statusWatch(Status)
    case syncPoll(SyncPoll)
    case query(Query)
    /// The current results, then a line per batch of changes (`QueryAnswer`), until the command goes.
    case queryWatch(Query)
    case pin(Pin)
    case fill(Fill)
    case evict(Evict)

    /// The command's name on the wire.
    public var command: String {
        switch self {
        case .open: "open"
        case .importDocument: "import"
        case .move: "move"
        case .export: "export"
        case .bookmarkCreate: "bookmark-create"
        case .bookmarkResolve: "bookmark-resolve"
        case .grantsList: "grants-list"
        case .grantsRevoke: "grants-revoke"
        case .appClose: "app-close"
        case .status: "status"
        case .statusWatch: "status-watch"
        case .syncPoll: "sync-poll"
        case .query: "query"
        case .queryWatch: "query-watch"
        case .pin: "pin"
        case .fill: "fill"
        case .evict: "evict"
        }
    }

    var fields: any Encodable {
        switch self {
        case .open(let r): r
        case .importDocument(let r): r
        case .move(let r): r
        case .export(let r): r
        case .bookmarkCreate(let r): r
        case .bookmarkResolve(let r): r
        case .grantsList(let r): r
        case .grantsRevoke(let r): r
        case .appClose(let r): r
        case .status(let r), .statusWatch(let r): r
        case .syncPoll(let r): r
        case .query(let r), .queryWatch(let r): r
        case .pin(let r): r
        case .fill(let r): r
        case .evict(let r): r
        }
    }
}

/// A request whose answer is one `Answer` (every one but query-watch and status-watch).
public protocol ControlCommand: Codable, Equatable, Sendable {
    associatedtype Answer: Codable, Sendable
    var request: ControlRequest { get }
}

extension ControlRequest {
    /// Open mode: a reference to a store document in the app's Documents (or a folder there).
    public struct Open: ControlCommand {
        public typealias Answer = ReferenceAnswer
        public var app: String
        public var path: String
        /// The name the reference shows under (the document's own when nil).
        public var name: String?
        public var into: String?
        public var noRename: Bool
        enum CodingKeys: String, CodingKey { case app, path, name = "as", into, noRename }
        public init(app: String, path: String, name: String? = nil, into: String? = nil, noRename: Bool = false) {
            (self.app, self.path, self.name, self.into, self.noRename) = (app, path, name, into, noRename)
        }
        public var request: ControlRequest { .open(self) }
    }

    /// Import mode: a copy in the app's Inbox.
    public struct Import: ControlCommand {
        public typealias Answer = CopyAnswer
        public var app: String
        public var path: String
        public init(app: String, path: String) { (self.app, self.path) = (app, path) }
        public var request: ControlRequest { .importDocument(self) }
    }

    /// MoveToService: an app's document into a store ("STORE" or "STORE/FOLDER"), a reference left behind.
    public struct Move: ControlCommand {
        public typealias Answer = ReferenceAnswer
        public var app: String
        public var path: String
        public var to: String
        public var noRename: Bool
        public init(app: String, path: String, to: String, noRename: Bool = false) {
            (self.app, self.path, self.to, self.noRename) = (app, path, to, noRename)
        }
        public var request: ControlRequest { .move(self) }
    }

    /// ExportToService: a copy of an app's document into a store.
    public struct Export: ControlCommand {
        public typealias Answer = CopyAnswer
        public var app: String
        public var path: String
        public var to: String
        public var noRename: Bool
        public init(app: String, path: String, to: String, noRename: Bool = false) {
            (self.app, self.path, self.to, self.noRename) = (app, path, to, noRename)
        }
        public var request: ControlRequest { .export(self) }
    }

    public struct BookmarkCreate: ControlCommand {
        public typealias Answer = BookmarkAnswer
        public var app: String
        public var path: String
        public init(app: String, path: String) { (self.app, self.path) = (app, path) }
        public var request: ControlRequest { .bookmarkCreate(self) }
    }

    public struct BookmarkResolve: ControlCommand {
        public typealias Answer = ResolvedBookmark
        public var app: String
        public var token: String
        public init(app: String, token: String) { (self.app, self.token) = (app, token) }
        public var request: ControlRequest { .bookmarkResolve(self) }
    }

    /// Every grant, or one app's.
    public struct GrantsList: ControlCommand {
        public typealias Answer = GrantsAnswer
        public var app: String?
        public init(app: String? = nil) { self.app = app }
        public var request: ControlRequest { .grantsList(self) }
    }

    public struct GrantsRevoke: ControlCommand {
        public typealias Answer = RevokeAnswer
        public var app: String
        public var path: String
        public init(app: String, path: String) { (self.app, self.path) = (app, path) }
        public var request: ControlRequest { .grantsRevoke(self) }
    }

    /// The app is done: its import copies go.
    public struct AppClose: ControlCommand {
        public typealias Answer = AppCloseAnswer
        public var app: String
        public init(app: String) { self.app = app }
        public var request: ControlRequest { .appClose(self) }
    }

    /// Everything `docdrive status` shows besides the config and the mount record, gathered by
    /// the daemon from its memory and its index (`DriveStatus.gather`), for the stores of the
    /// config as it reads it now.
    public struct Status: ControlCommand {
        public typealias Answer = DriveStatus
        public init() {}
        public var request: ControlRequest { .status(self) }
    }

    /// Pins (keeps on this device, also what is added later) or unpins a store file or folder
    /// (`path` from the mount root). The answer lists the placeholders to fill (`fill`).
    public struct Pin: ControlCommand {
        public typealias Answer = PinAnswer
        public var path: String
        public var on: Bool
        public init(path: String, on: Bool) { (self.path, self.on) = (path, on) }
        public var request: ControlRequest { .pin(self) }
    }

    /// Downloads a placeholder's content now (answered once it is here).
    public struct Fill: ControlCommand {
        public typealias Answer = FillAnswer
        public var path: String
        public init(path: String) { self.path = path }
        public var request: ControlRequest { .fill(self) }
    }

    /// Frees the space of the clean, closed, unpinned files at or under `path`.
    public struct Evict: ControlCommand {
        public typealias Answer = EvictAnswer
        public var path: String
        public init(path: String) { self.path = path }
        public var request: ControlRequest { .evict(self) }
    }

    /// Look at every store's remote now; answered once that look is done (or after `timeout`
    /// seconds, 0.5 to 120; 120 when nil). With `retryFailed`, every file whose upload failed
    /// goes again now, before its back-off ends.
    public struct SyncPoll: ControlCommand {
        public typealias Answer = SyncPollAnswer
        public var timeout: Double?
        public var retryFailed: Bool?
        /// Compare each store's local copy with its records first (`SyncService.compareWithRecords`).
        public var compare: Bool?
        public init(timeout: Double? = nil, retryFailed: Bool? = nil, compare: Bool? = nil) {
            self.timeout = timeout
            self.retryFailed = retryFailed
            self.compare = compare
        }
        public var request: ControlRequest { .syncPoll(self) }
    }

    /// `docdrive query`: the expression's words, the scopes as `QueryService.scope` reads them.
    public struct Query: ControlCommand {
        public typealias Answer = QueryAnswer
        public var expr: [String]
        public var scopes: [String]
        public var sort: QuerySort?
        /// nil: largest and newest first for size and modified, A to Z for name.
        public var descending: Bool?
        public var limit: Int?
        /// Answer with the count only.
        public var count: Bool
        /// Answer with the paths only (plain output needs no more).
        public var pathsOnly: Bool
        /// Answer in the query fast path's form (see QueryService.answerRaw), not JSON.
        public var raw: Bool
        enum CodingKeys: String, CodingKey { case expr, scopes = "in", sort, descending, limit, count, pathsOnly, raw }
        public init(expr: [String], scopes: [String] = [], sort: QuerySort? = nil, descending: Bool? = nil, limit: Int? = nil,
                    count: Bool = false, pathsOnly: Bool = false, raw: Bool = false) {
            (self.expr, self.scopes, self.sort, self.descending, self.limit) = (expr, scopes, sort, descending, limit)
            (self.count, self.pathsOnly, self.raw) = (count, pathsOnly, raw)
        }
        public var request: ControlRequest { .query(self) }
    }
}

extension QuerySort: Codable {}

// MARK: the answers

/// open and move: the reference entry and the store document it stands for.
public struct ReferenceAnswer: Codable, Equatable, Sendable {
    public var reference: String
    public var target: String
    public var item: String
    public var app: String
    public init(reference: String, target: String, item: String, app: String) {
        (self.reference, self.target, self.item, self.app) = (reference, target, item, app)
    }
}

/// import and export: the new copy and the document it was made from.
public struct CopyAnswer: Codable, Equatable, Sendable {
    public var copy: String
    public var source: String
    public var app: String
    public init(copy: String, source: String, app: String) { (self.copy, self.source, self.app) = (copy, source, app) }
}

public struct BookmarkAnswer: Codable, Equatable, Sendable {
    public var token: String
    public var path: String
    public var item: String
    public var app: String
    public init(token: String, path: String, item: String, app: String) {
        (self.token, self.path, self.item, self.app) = (token, path, item, app)
    }
}

/// Where a bookmark's document is now; stale when it moved since the bookmark was made.
public struct ResolvedBookmark: Codable, Equatable, Sendable {
    public var path: String
    public var stale: Bool
    public var item: String
    public var app: String
    public init(path: String, stale: Bool, item: String, app: String) {
        (self.path, self.stale, self.item, self.app) = (path, stale, item, app)
    }
}

public struct GrantsAnswer: Codable, Equatable, Sendable {
    public var grants: [GrantRow]
    public init(grants: [GrantRow]) { self.grants = grants }
}

/// A grant, where its document is now, and whether it is still there ("ok" or "missing").
public struct GrantRow: Codable, Equatable, Sendable {
    public var app: String
    public var item: String
    /// When it was granted (seconds since 1970).
    public var granted: Double
    public var path: String
    public var status: String
    public init(app: String, item: String, granted: Double, path: String, status: String) {
        (self.app, self.item, self.granted, self.path, self.status) = (app, item, granted, path, status)
    }
}

public struct RevokeAnswer: Codable, Equatable, Sendable {
    public var app: String
    /// The path as the command gave it.
    public var revoked: String
    public var item: String
    public init(app: String, revoked: String, item: String) { (self.app, self.revoked, self.item) = (app, revoked, item) }
}

public struct AppCloseAnswer: Codable, Equatable, Sendable {
    public var app: String
    /// How many import copies were removed.
    public var removed: Int
    public init(app: String, removed: Int) { (self.app, self.removed) = (app, removed) }
}

/// A reference entry: "ok", or what is wrong with it (`ReferenceProblem`); item and target are
/// unknown for an invalid one.
public struct ReferenceRow: Codable, Equatable, Sendable {
    public var app: String
    public var path: String
    public var status: String
    public var item: String?
    public var target: String?
    public init(app: String, path: String, status: String, item: String? = nil, target: String? = nil) {
        (self.app, self.path, self.status, self.item, self.target) = (app, path, status, item, target)
    }
}

public struct PinAnswer: Codable, Equatable, Sendable {
    /// The files at or under the path (pinning: those still to download, mount paths, sizes).
    public var files: Int
    public var toFill: [FileSize]
    public init(files: Int, toFill: [FileSize]) { (self.files, self.toFill) = (files, toFill) }
}

public struct FileSize: Codable, Equatable, Sendable {
    public var path: String
    public var size: Int64
    public init(path: String, size: Int64) { (self.path, self.size) = (path, size) }
}

public struct FillAnswer: Codable, Equatable, Sendable {
    public var path: String
    public var size: Int64
    public init(path: String, size: Int64) { (self.path, self.size) = (path, size) }
}

public struct EvictAnswer: Codable, Equatable, Sendable {
    public var files: Int
    public var evicted: Int
    public var freed: Int64
    /// One sentence per file that stays (changed, open, pinned).
    public var refused: [String]
    public init(files: Int, evicted: Int, freed: Int64, refused: [String]) {
        (self.files, self.evicted, self.freed, self.refused) = (files, evicted, freed, refused)
    }
}

/// Per store name: when its remote was last looked at, whether it is offline, who writes to it.
public struct SyncPollAnswer: Codable, Equatable, Sendable {
    public var stores: [String: RemoteState]
    /// Every store's poll ended, and nothing was queued, done or left waiting from the request's
    /// start to its answer (`SyncService.isIdle`): the sync needs no other round. Nil from a daemon
    /// before it (the sync then always looks twice).
    public var idle: Bool?
    public init(stores: [String: RemoteState], idle: Bool? = nil) {
        self.stores = stores
        self.idle = idle
    }
}

/// A query's answer: its items, only their paths (`pathsOnly`), or only their count (`count`).
/// With query-watch, the first line holds the current items, each later one the items that
/// changed, with their `event`.
public struct QueryAnswer: Codable, Equatable, Sendable {
    public var items: [QueryItem]?
    public var paths: [String]?
    public var count: Int?
    public init(items: [QueryItem]? = nil, paths: [String]? = nil, count: Int? = nil) {
        (self.items, self.paths, self.count) = (items, paths, count)
    }
}

/// An item a query found; path is mount-relative. Of an item that left a live query, only the
/// path and the event are known.
public struct QueryItem: Codable, Equatable, Sendable {
    public var path: String
    public var name: String?
    public var kind: String?
    public var size: Int64?
    public var modified: Double?
    /// True for reference entries and their targets; absent otherwise.
    public var external: Bool?
    public var store: String?
    public var app: String?
    /// In a live query's changes: "+" entered, "-" left, "~" changed.
    public var event: String?
    public init(path: String, name: String? = nil, kind: String? = nil, size: Int64? = nil, modified: Double? = nil,
                external: Bool? = nil, store: String? = nil, app: String? = nil, event: String? = nil) {
        (self.path, self.name, self.kind, self.size, self.modified) = (path, name, kind, size, modified)
        (self.external, self.store, self.app, self.event) = (external, store, app, event)
    }
}

/// One answer line: the command's answer, or the one error every command may get.
public enum ControlAnswer<Result: Codable & Sendable>: Sendable {
    case ok(Result)
    case failed(DriveError)

    /// The answer, or its error thrown.
    public func get() throws(DriveError) -> Result {
        switch self {
        case .ok(let r): return r
        case .failed(let e): throw e
        }
    }
}

// MARK: the wire

enum ControlKey: String, CodingKey {
    case version, command, ok, result, code, error
}

/// The version a message carries: its "version" field, 1 without one.
private func messageVersion(_ decoder: any Decoder) throws -> Int {
    try decoder.container(keyedBy: ControlKey.self).decodeIfPresent(Int.self, forKey: .version) ?? 1
}

extension ControlRequest: Codable {
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: ControlKey.self)
        try c.encode(ControlProtocol.version, forKey: .version)
        try c.encode(command, forKey: .command)
        try fields.encode(to: encoder)
    }

    /// Throws a DriveError for another version or an unknown command (before anything else is read).
    public init(from decoder: any Decoder) throws {
        let v = try messageVersion(decoder)
        guard v == ControlProtocol.version else {
            throw DriveError(.protocolMismatch, ControlProtocol.mismatch(command: v, daemon: ControlProtocol.version))
        }
        switch try decoder.container(keyedBy: ControlKey.self).decode(String.self, forKey: .command) {
        case "open": self = .open(try Open(from: decoder))
        case "import": self = .importDocument(try Import(from: decoder))
        case "move": self = .move(try Move(from: decoder))
        case "export": self = .export(try Export(from: decoder))
        case "bookmark-create": self = .bookmarkCreate(try BookmarkCreate(from: decoder))
        case "bookmark-resolve": self = .bookmarkResolve(try BookmarkResolve(from: decoder))
        case "grants-list": self = .grantsList(try GrantsList(from: decoder))
        case "grants-revoke": self = .grantsRevoke(try GrantsRevoke(from: decoder))
        case "app-close": self = .appClose(try AppClose(from: decoder))
        case "status": self = .status(try Status(from: decoder))
        case "status-watch": self = .statusWatch(try Status(from: decoder))
        case "sync-poll": self = .syncPoll(try SyncPoll(from: decoder))
        case "query": self = .query(try Query(from: decoder))
        case "query-watch": self = .queryWatch(try Query(from: decoder))
        case "pin": self = .pin(try Pin(from: decoder))
        case "fill": self = .fill(try Fill(from: decoder))
        case "evict": self = .evict(try Evict(from: decoder))
        case let other: throw DriveError(.badRequest, "Unknown request \"\(other)\".")
        }
        // An empty text a command needs counts as missing, as it always did (`--app ""`).
        if let key = neededText.first(where: { $0.value.isEmpty })?.key {
            throw DriveError(.invalidName, "The request lacks \(key).")
        }
    }

    /// The texts each command needs, by key.
    var neededText: KeyValuePairs<String, String> {
        switch self {
        case .open(let r): ["app": r.app, "path": r.path]
        case .importDocument(let r): ["app": r.app, "path": r.path]
        case .move(let r): ["app": r.app, "path": r.path, "to": r.to]
        case .export(let r): ["app": r.app, "path": r.path, "to": r.to]
        case .bookmarkCreate(let r): ["app": r.app, "path": r.path]
        case .bookmarkResolve(let r): ["app": r.app, "token": r.token]
        case .grantsRevoke(let r): ["app": r.app, "path": r.path]
        case .appClose(let r): ["app": r.app]
        case .pin(let r): ["path": r.path]
        case .fill(let r): ["path": r.path]
        case .evict(let r): ["path": r.path]
        case .grantsList, .status, .statusWatch, .syncPoll, .query, .queryWatch: [:]
        }
    }

    /// The request on a line the daemon read, or the one sentence it answers instead: for any
    /// bytes at all (ControlProtocolTests feeds it garbage).
    public static func decode(_ line: Data) throws(DriveError) -> ControlRequest {
        guard line.count <= ControlProtocol.maxRequest else {
            throw DriveError(.badRequest, "The request is longer than \(ControlProtocol.maxRequest / 1024) KiB.")
        }
        do {
            return try JSONDecoder().decode(ControlRequest.self, from: line)
        } catch let e as DriveError {
            throw e
        } catch DecodingError.keyNotFound(let key, _) {
            throw DriveError(.badRequest, key.stringValue == "command" ? "The request names no command." : "The request lacks \(key.stringValue).")
        } catch DecodingError.typeMismatch(_, let c) where !c.codingPath.isEmpty,
                DecodingError.valueNotFound(_, let c) where !c.codingPath.isEmpty,
                DecodingError.dataCorrupted(let c) where !c.codingPath.isEmpty {
            throw DriveError(.badRequest, "The request's \(c.codingPath.map(\.stringValue).joined(separator: ".")) is not valid.")
        } catch {
            throw DriveError(.badRequest, "The request is not one JSON object on one line.")
        }
    }

    /// The request's line, as the commands send it. Only a number that is not finite fails to
    /// encode (a sync-poll timeout of inf): the line is then empty, and the daemon refuses it.
    public func line() -> Data {
        var data = (try? JSONEncoder.control.encode(self)) ?? Data()
        data.append(0x0A)
        return data
    }
}

extension ControlAnswer: Codable {
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: ControlKey.self)
        try c.encode(ControlProtocol.version, forKey: .version)
        switch self {
        case .ok(let result):
            try c.encode(true, forKey: .ok)
            try c.encode(result, forKey: .result)
        case .failed(let e):
            try c.encode(false, forKey: .ok)
            try c.encode(e.code, forKey: .code)
            try c.encode(e.message, forKey: .error)
        }
    }

    /// Throws a DriveError for another version (before anything else is read).
    public init(from decoder: any Decoder) throws {
        let v = try messageVersion(decoder)
        guard v == ControlProtocol.version else {
            throw DriveError(.protocolMismatch, ControlProtocol.mismatch(command: ControlProtocol.version, daemon: v))
        }
        let c = try decoder.container(keyedBy: ControlKey.self)
        if try c.decode(Bool.self, forKey: .ok) {
            self = .ok(try c.decode(Result.self, forKey: .result))
        } else {
            self = .failed(DriveError(try c.decode(DriveError.Code.self, forKey: .code), try c.decode(String.self, forKey: .error)))
        }
    }

    /// The answer on a line the command read.
    public static func decode(_ line: Data) throws(DriveError) -> ControlAnswer {
        do {
            return try JSONDecoder().decode(ControlAnswer.self, from: line)
        } catch let e as DriveError {
            throw e
        } catch {
            throw DriveError(.io, "The daemon's answer could not be read (did it stop?).")
        }
    }

    /// The answer's line, as the daemon sends it (its numbers are sizes, counts and times: finite).
    public func line() -> Data {
        var data = (try? JSONEncoder.control.encode(self)) ?? Data()
        data.append(0x0A)
        return data
    }
}

extension JSONEncoder {
    /// Paths are mostly slashes: unescaped, an answer of 100,000 of them is a fifth shorter.
    static var control: JSONEncoder {
        let e = JSONEncoder()
        e.outputFormatting = .withoutEscapingSlashes
        return e
    }
}

extension DriveError.Code: Codable {
    public init(from decoder: any Decoder) throws { self.init(named: try decoder.singleValueContainer().decode(String.self)) }
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(description)
    }
}

// MARK: the query fast path's request

extension ControlRequest.Query {
    /// `.query(self)`'s request line as the `docdrive` front writes it (QueryWire, no Foundation):
    /// with the keys and version `line()` writes. ControlProtocolTests decodes it and compares.
    public func fastPathLine() -> String {
        QueryWire.requestLine(expr: expr, scopes: scopes, sort: sort?.rawValue, descending: descending, limit: limit,
                              count: count, pathsOnly: pathsOnly, raw: raw)
    }
}

extension ControlProtocol {
    /// A JSON string, as JSONEncoder writes it (slashes unescaped).
    public static func jsonString(_ s: String) -> String { QueryWire.jsonString(s) }
}
