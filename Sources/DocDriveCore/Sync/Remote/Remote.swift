// Remote: what a store's remote must do for several devices to share it without losing an update
// (DESIGN.md 9). FolderRemote and S3Remote implement it; the sync engine uses nothing else.
import Foundation

/// What travels with an item on a remote beside its bytes (folder: extended attributes; S3:
/// `x-amz-meta-*`). Every field may be missing on an item another tool wrote.
public struct RemoteMeta: Equatable, Sendable, Codable {
    /// The item's stable id: the same on every device (`user.docdrive.id`).
    public var itemID: String?
    /// The id of the device that wrote this version, and its name (shown in conflict copies).
    public var deviceID: String?
    public var deviceName: String?
    /// Modification time in nanoseconds since 1970, and permission bits, as the writer had them.
    public var mtimeNanoseconds: Int64?
    public var mode: UInt32?
    /// The permission bits of a file that came with none (another tool's object): as rclone
    /// and a new file under the usual umask have them. (A folder without them: 0755.)
    public static let fileModeWhenNone: UInt32 = 0o644
    /// `mode`, or `fileModeWhenNone` (for files).
    public var fileMode: mode_t { mode_t((mode ?? Self.fileModeWhenNone) & 0o7777) }
    /// Where a file's version comes from: the writing device's local version of it (size,
    /// mtime and inode there) and the path it was written to (StoreSync.origin). With
    /// `deviceID` it lets that device know the version for its own after a stop between the
    /// remote write and its record (StoreSync.ownUnrecorded).
    public var origin: String?
    /// The remote version this version was written over (the version its write was conditional
    /// on), `RemoteMeta.created` for a create. Written by remotes whose conditional writes may
    /// not exclude each other (S3: SeaweedFS lets a multipart upload's completion and a
    /// PutObject of the same moment both succeed): two versions written over the same one are
    /// siblings, and the one that landed first was replaced unseen (`SyncDecision.replacedUnseen`).
    public var parent: String?
    /// `parent` of a version written where nothing was.
    public static let created = "none"

    public init(itemID: String? = nil, deviceID: String? = nil, deviceName: String? = nil,
                mtimeNanoseconds: Int64? = nil, mode: UInt32? = nil, origin: String? = nil, parent: String? = nil) {
        self.itemID = itemID
        self.deviceID = deviceID
        self.deviceName = deviceName
        self.mtimeNanoseconds = mtimeNanoseconds
        self.mode = mode
        self.origin = origin
        self.parent = parent
    }

    /// Takes the device id and name from `strings` when an equal one is there (and keeps them
    /// there otherwise, up to `SharedStrings.most`).
    mutating func shareDeviceStrings(in strings: inout SharedStrings) {
        deviceID = deviceID.map { strings.share($0) }
        deviceName = deviceName.map { strings.share($0) }
    }
}

/// Device ids and names, each kept once (every item a device wrote carries the same two, and a
/// listing of 100,000 items decoded 100,000 copies of each), and numbered (a kept S3 answer names
/// them by number).
struct SharedStrings: Sendable {
    private(set) var all = [String]()
    private var numbers = [String: Int]()
    /// More are not kept (a bucket written by a great many devices): the rest go inline.
    static let most = 4096

    /// The number of `s`, kept now if it is new and there is room; nil when there is none.
    mutating func number(of s: String) -> Int? {
        if let n = numbers[s] { return n }
        guard all.count < Self.most else { return nil }
        all.append(s)
        numbers[s] = all.count - 1
        return all.count - 1
    }

    /// The string kept equal to `s` (kept now if it is new and there is room), or `s`.
    mutating func share(_ s: String) -> String { number(of: s).map { all[$0] } ?? s }
}

/// One item of a remote listing.
public struct RemoteItem: Equatable, Sendable {
    public var path: StorePath
    public var kind: SyncEntry.Kind
    /// The remote's version token: any change of content (or a replacement by another item)
    /// changes it. Folder remote: size, mtime and inode; S3: the ETag. Folders: "".
    public var version: String
    public var size: Int64
    public var meta: RemoteMeta

    public init(path: StorePath, kind: SyncEntry.Kind, version: String, size: Int64, meta: RemoteMeta = RemoteMeta()) {
        self.path = path
        self.kind = kind
        self.version = version
        self.size = size
        self.meta = meta
    }
}

/// A listing in two steps, for a remote whose listing does not carry each item's metadata (S3:
/// the keys with their size, time and ETag come a thousand to a request; the item id, mode and
/// time as the writer had them, and whether an object is a link, need a HEAD each). The first
/// step (`Remote.listQuickly`) gives every item; `Remote.complete` looks up the pending ones.
public struct RemoteListing: Sendable {
    /// Every item of the store, sorted by path. A pending item's `meta` is empty but for
    /// `mtimeNanoseconds`, the time the remote wrote it (S3: `LastModified`, to the second),
    /// and its kind is `.file` or `.folder` (a link shows as a file until looked up).
    public var items: [RemoteItem]
    /// The items whose metadata is not known yet.
    public var pending: Set<StorePath>
    /// What the remote needs to look each pending item up.
    let lookups: [StorePath: Lookup]
    /// Keys of objects the store leaves unshown (`S3Keys.isUnshown`: another tool's names that
    /// DocDrive writes escaped), at most `unshownKept` of them, and how many there were.
    public var unshown: [String] = []
    public var unshownCount = 0
    public static let unshownKept = 5

    struct Lookup: Sendable {
        var key: String
        var modified: String?
    }

    init(items: [RemoteItem], lookups: [StorePath: Lookup] = [:]) {
        self.items = items
        self.lookups = lookups
        self.pending = Set(lookups.keys)
    }
}

/// What a conditional write or delete expects to find on the remote.
public enum RemoteExpectation: Equatable, Sendable {
    /// Nothing at the path: create only (S3 `If-None-Match: *`, folder `RENAME_NOREPLACE`).
    case absent
    /// Exactly this version (S3 `If-Match`, folder: the version checked under the store's lock).
    case version(String)

    /// The version expected, nil for `absent`.
    public var version: String? {
        if case .version(let v) = self { return v }
        return nil
    }
}

/// A store's remote as the sync engine uses it. Every write and delete is conditional: when the
/// remote does not hold what the caller expects, the call throws `RemoteError.Code.changed`
/// and changes nothing. A remote that cannot be reached throws `.unreachable`; it is never read
/// as empty.
public protocol Remote: Sendable {
    /// For sentences: "the remote folder /mnt/nas/work", "s3://bucket/prefix".
    var displayName: String { get }

    /// Throws a sentence unless the remote is there, answers and is the store's.
    func checkReachable() throws(RemoteError)

    /// Every item of the store (files, folders, links), with versions and metadata. Throws
    /// (never returns a partial or empty list) when the remote cannot be listed.
    func list() throws(RemoteError) -> [RemoteItem]

    /// `list()` in two steps (RemoteListing): every item now, the metadata of some later. Only
    /// `complete`'s answer is what `list()` returns.
    func listQuickly() throws(RemoteError) -> RemoteListing

    /// `listQuickly`, handing over the items of each part of the listing as it comes (with
    /// those of them that are pending), in no promised order; an item may be handed over again
    /// (changed by a later part: a folder's marker, or a folder where a file was). The
    /// listing returned is what counts.
    func listQuickly(pages: (_ items: [RemoteItem], _ pending: Set<StorePath>) -> Void) throws(RemoteError) -> RemoteListing

    /// The items of `listing` with the metadata of its pending items looked up (what `list()`
    /// would have returned then). Throws, as `list()`, when the remote cannot be reached.
    /// Consumes the listing: when the caller gives up its own, the items are completed where
    /// they are, not in a copy (a store of 100,000 items: 14 MB).
    func complete(_ listing: consuming RemoteListing) throws(RemoteError) -> [RemoteItem]

    /// A digest of everything a listing would show, read more cheaply than the listing (a
    /// folder remote: every entry's name, type, inode, size, mtime and ctime, without the
    /// items' metadata, which changes the ctime); nil for a remote that has none (S3), and when
    /// a change is too recent to be sure of (FolderRemote.fingerprint). Equal digests mean an
    /// equal listing.
    func fingerprint() throws(RemoteError) -> [UInt8]?

    /// Whether `fingerprint` changes with every writer's change (a folder remote's walk), or
    /// only with DocDrive's (S3's change mark, which another tool does not rewrite): then a poll
    /// lists the whole remote at least once per the store's `reconcile` time however quiet.
    var fingerprintSeesEveryWriter: Bool { get }

    /// Tells the other devices that this one changed the store, where `fingerprint` does not see
    /// it by itself (S3: a journal object naming the batch's changes, then the change mark
    /// rewritten). Called after a batch of writes, once for all.
    func announceChanges(_ batch: JournalBatch) throws(RemoteError)

    /// Whether the remote keeps a journal of DocDrive's changes (`readJournal`): then a poll that
    /// finds the fingerprint changed reads the journal, not the whole remote.
    var keepsJournal: Bool { get }

    /// The remote's own time now, in milliseconds (a journal cursor starts there), nil when not
    /// known.
    func journalTime() throws(RemoteError) -> Int64?

    /// What other devices wrote after `cursor` (`keepsJournal` remotes only).
    func readJournal(after cursor: JournalCursor) throws(RemoteError) -> JournalPage

    /// The item at `path`, or nil when there is none.
    func item(at path: StorePath) throws(RemoteError) -> RemoteItem?

    /// Writes the content of `path` (exactly `version` when given, else whatever is there) into
    /// the local descriptor `out` from its start, and returns the item as read. `.changed`
    /// when the version is no longer there; `.notFound` when nothing is.
    func download(_ path: StorePath, version: String?, to out: Int32,
                  progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> RemoteItem

    /// Uploads the open local file `source` (read with pread, from 0 to its end) to `path`,
    /// if the remote holds what `expecting` says, with `meta`. Returns the new item.
    func upload(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> RemoteItem

    /// `upload`, leaving the write's durability to `makeDurable`: the item is on the remote when
    /// this returns, but a crash of the machine may still lose it until `makeDurable` was given
    /// the folder that comes back (nil: durable already). A batch of small files then costs one
    /// flush of each remote folder they went into, not one per file. Remotes whose every write
    /// is durable once it returns (S3) upload as `upload` does.
    func uploadDurableLater(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                            limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> (item: RemoteItem, folder: StorePath?)

    /// Makes what `uploadDurableLater` wrote into `folders` durable. Fails when a folder can no
    /// longer be made so (gone from the remote, the remote unreachable).
    func makeDurable(_ folders: Set<StorePath>) throws(RemoteError)

    /// Makes `path` a folder. One already there keeps its metadata, except that a folder with no
    /// item id (made on the way to an item moved or uploaded into it) takes `meta`'s where the
    /// remote can hold it.
    func makeFolder(_ path: StorePath, meta: RemoteMeta) throws(RemoteError) -> RemoteItem

    /// Makes `path` a symbolic link holding `target`, if the remote holds what `expecting` says.
    func makeSymlink(_ target: [UInt8], at path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta) throws(RemoteError) -> RemoteItem

    /// Deletes the file or link at `path` if it is still `version`; a folder only when empty
    /// (version ""). Already gone: fine.
    func delete(_ path: StorePath, version: String) throws(RemoteError)

    /// Moves the item at `from` (if still `version`) to `to`, where nothing may be. A folder
    /// moves with what is in it. Returns the moved item.
    func move(_ from: StorePath, version: String, to: StorePath) throws(RemoteError) -> RemoteItem

    /// Gives the file at `path` (if still `version`) the metadata `meta` (its item id above all),
    /// its bytes unchanged. How one item id that two devices' crossed writes left at two paths
    /// becomes two items again (`StoreSync.healDuplicateIDs`). Returns the item.
    func reassign(_ path: StorePath, version: String, meta: RemoteMeta) throws(RemoteError) -> RemoteItem

    /// Clears what an interrupted write of this device left (temporary files, unfinished
    /// multipart uploads); call when no write of this device runs. Returns how many.
    func removeStaleUploads() -> Int

    /// Tries once more what this process could not clean up after a failed write (a multipart
    /// upload the server did not let it abort), and keeps what the next start may use (S3: the
    /// HEAD answers); call when no write of this device runs.
    func finishCleanup()

    /// The picture (a PNG thumbnail, RemotePictures) kept for the item `id`; nil when none is.
    func picture(item id: String) throws(RemoteError) -> [UInt8]?

    /// Keeps `png` as the picture of the item `id` (replacing one kept before).
    func putPicture(item id: String, _ png: [UInt8]) throws(RemoteError)
}

extension Remote {
    public func finishCleanup() {}

    /// A remote whose listing carries the metadata: one step.
    public func listQuickly() throws(RemoteError) -> RemoteListing { RemoteListing(items: try list()) }

    public func listQuickly(pages: (_ items: [RemoteItem], _ pending: Set<StorePath>) -> Void) throws(RemoteError) -> RemoteListing {
        let listing = try listQuickly()
        pages(listing.items, listing.pending)
        return listing
    }

    public func complete(_ listing: consuming RemoteListing) throws(RemoteError) -> [RemoteItem] { listing.items }

    public func fingerprint() throws(RemoteError) -> [UInt8]? { nil }

    public var fingerprintSeesEveryWriter: Bool { true }

    public func announceChanges(_ batch: JournalBatch) throws(RemoteError) {}

    public var keepsJournal: Bool { false }

    public func journalTime() throws(RemoteError) -> Int64? { nil }

    public func readJournal(after cursor: JournalCursor) throws(RemoteError) -> JournalPage { JournalPage(cursor: cursor) }

    public func uploadDurableLater(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                                   limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> (item: RemoteItem, folder: StorePath?) {
        (try upload(from: source, to: path, expecting: expecting, meta: meta, limit: limit, progress: progress), nil)
    }

    public func makeDurable(_ folders: Set<StorePath>) throws(RemoteError) {}
}
