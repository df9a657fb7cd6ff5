// DriveStatus: what `docdrive status` shows of a drive besides its config and mount record, as one
// value: the daemon's answer to the control socket's `status`, gathered from its memory (the
// uploader) and its index readers; or, when no daemon runs, gathered the same way by the command
// from the index opened read-only. One function gathers it in both cases (`gather`).
import Foundation
#if canImport(Glibc)
import Glibc
#endif

public struct DriveStatus: Codable, Equatable, Sendable {
    /// Items with a stable id in the index (as written: a daemon writes its events within 0.25 s).
    public var items: Int
    /// Entries of the upload queue per state, every store together.
    public var uploads: [UploadState: Int]
    /// What `docdrive sync` waits for (`UploadQueue.waitingCount`): `status --watch` ends at 0.
    public var waiting: Int
    /// The stores asked for, in their order.
    public var stores: [StoreStatus]
    public var device: DeviceIdentity?
    /// The daemon's last failed write to the index or the upload queue, until one works again
    /// (nil without a daemon).
    public var indexWriteError: String?
    /// Reference entries and their state (nil: no daemon was asked; the daemon resolves them).
    public var references: [ReferenceRow]?
    /// Bytes the drive's user may still write on the drive home's disk (nil: cannot tell).
    public var homeDiskFree: Int64?

    public init(items: Int = 0, uploads: [UploadState: Int] = [:], waiting: Int = 0, stores: [StoreStatus] = [],
                device: DeviceIdentity? = nil, indexWriteError: String? = nil, references: [ReferenceRow]? = nil,
                homeDiskFree: Int64? = nil) {
        (self.items, self.uploads, self.waiting, self.stores) = (items, uploads, waiting, stores)
        (self.device, self.indexWriteError, self.references, self.homeDiskFree) = (device, indexWriteError, references, homeDiskFree)
    }
}

/// One store's uploads: from the queue, its local copy and (with a daemon) what the daemon runs.
public struct StoreStatus: Codable, Equatable, Sendable {
    public var name: String
    /// Entries of the upload queue per state.
    public var uploads: [UploadState: Int]
    /// Sizes of the local files waiting for their upload.
    public var bytesLeft: Int64
    public var failed: [FailedUpload]
    /// The workers the daemon runs the store with (nil: no daemon, or it has not started the
    /// store yet).
    public var runningWorkers: Int?
    /// Files being copied to or from the remote now, by path.
    public var inFlight: [InFlightUpload]
    /// The store keeps changing, so its uploads wait for a pause (`SyncService.holdUntil`).
    public var held: Bool
    /// The remote as the daemon's last poll found it (nil without a daemon).
    public var remote: RemoteState?
    public var conflicts: [ConflictRecord]
    /// Files that deletes from the remote took from the local copy, kept a while.
    public var keptDeleted: KeptDeleted

    public init(name: String, uploads: [UploadState: Int] = [:], bytesLeft: Int64 = 0, failed: [FailedUpload] = [],
                runningWorkers: Int? = nil, inFlight: [InFlightUpload] = [], held: Bool = false, remote: RemoteState? = nil,
                conflicts: [ConflictRecord] = [], keptDeleted: KeptDeleted = KeptDeleted(folder: "", files: 0, bytes: 0)) {
        (self.name, self.uploads, self.bytesLeft, self.failed, self.runningWorkers) = (name, uploads, bytesLeft, failed, runningWorkers)
        (self.inFlight, self.held, self.remote, self.conflicts, self.keptDeleted) = (inFlight, held, remote, conflicts, keptDeleted)
    }
}

/// A file whose upload failed, and why.
public struct FailedUpload: Codable, Equatable, Sendable {
    public var path: String
    public var error: String
    public init(path: String, error: String) { (self.path, self.error) = (path, error) }
}

/// The folder of a store's files deleted elsewhere and kept here (`stores/NAME/deleted`), and
/// the room they take.
public struct KeptDeleted: Codable, Equatable, Sendable {
    public var folder: String
    public var files: Int
    public var bytes: Int64
    public init(folder: String, files: Int, bytes: Int64) { (self.folder, self.files, self.bytes) = (folder, files, bytes) }
}

/// Counts by state travel as an object keyed by the state's name (`{"pending":2}`).
extension UploadState: Codable, CodingKeyRepresentable {}

extension DriveStatus {
    /// The status of the drive at `home` for `stores`: by the daemon from its own `index` and
    /// `sync` (with the `references` it resolved), or by `docdrive status` when no daemon runs,
    /// from the index opened read-only (`ItemIndex(readingOnly:)`; nil when there is none yet) and
    /// no uploader. Reads only: nothing is written to the index.
    public static func gather(home: DriveHome, stores: [StoreConfig], index: ItemIndex?, sync: SyncService? = nil,
                              references: [ReferenceRow]? = nil) -> DriveStatus {
        var s = DriveStatus(device: try? home.device(), indexWriteError: sync?.lastIndexWriteError(), references: references,
                            homeDiskFree: bytesFree(home.path))
        let queue = index?.uploads
        var failures = [(root: String, path: StorePath, error: String)]()
        var conflicts = [(root: String, ConflictRecord)]()
        if let index {
            s.items = (try? index.itemCount()) ?? 0
            s.uploads = (try? index.uploads.counts()) ?? [:]
            s.waiting = (try? index.uploads.waitingCount()) ?? 0
            failures = (try? index.uploads.failures()) ?? []
            conflicts = (try? index.bases.conflicts()) ?? []
        }
        let running = sync?.runningStores() ?? [:]
        let inFlight = (sync?.uploadsInFlight() ?? []).sorted { ($0.store, $0.path) < ($1.store, $1.path) }
        for c in stores {
            let live = running[c.name]
            let kept = RecentlyDeleted.folder(ofStore: home.storePath(c.name))
            let use = RecentlyDeleted.usage(of: kept)
            s.stores.append(StoreStatus(
                name: c.name,
                uploads: (try? queue?.counts(root: c.rootKey)) ?? [:],
                bytesLeft: (try? queue?.bytesLeft(root: c.rootKey, cache: home.cachePath(c.name))) ?? 0,
                failed: failures.filter { $0.root == c.rootKey }.map { FailedUpload(path: $0.path.description, error: $0.error) },
                runningWorkers: live?.workers,
                inFlight: inFlight.filter { $0.store == c.name },
                held: live?.held ?? false, remote: live?.remote,
                conflicts: conflicts.filter { $0.root == c.rootKey }.map(\.1),
                keptDeleted: KeptDeleted(folder: kept, files: use.files, bytes: use.bytes)))
        }
        return s
    }

    /// Bytes the drive's user may still write on the disk of `path` (root may use the reserve).
    static func bytesFree(_ path: String) -> Int64? {
        var sv = statvfs()
        guard statvfs(path, &sv) == 0 else { return nil }
        let blocks = geteuid() == 0 ? sv.f_bfree : sv.f_bavail
        return Int64(blocks) * Int64(sv.f_frsize)
    }
}
