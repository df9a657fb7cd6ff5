// UploadActivity: what a running daemon publishes in run/uploads.json for `docdrive status`
// (a separate process): the uploads in flight with their progress, workers, the index's write error.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Which way a file is being copied.
public enum TransferDirection: String, Codable, Sendable, Equatable {
    /// To the remote (an upload).
    case up
    /// From the remote (a download: a remote change, or a placeholder being filled).
    case down
}

/// One file being copied to or from its remote.
public struct InFlightUpload: Codable, Sendable, Equatable {
    public var store: String
    public var path: String
    public var done: Int64
    public var total: Int64
    /// nil from a daemon that predates downloads in status: an upload.
    public var direction: TransferDirection?

    public init(store: String, path: String, done: Int64, total: Int64, direction: TransferDirection = .up) {
        self.store = store
        self.path = path
        self.done = done
        self.total = total
        self.direction = direction
    }

    public var isDownload: Bool { direction == .down }
}

/// The upload settings a store runs with in the daemon (which may lag the config by a second).
public struct StoreActivity: Codable, Sendable, Equatable {
    public var name: String
    public var workers: Int
    public var bandwidth: Int64?
    /// The store's files keep changing: its uploads wait until it has been quiet for its
    /// write-back delay (nil from a daemon that predates it).
    public var held: Bool?
    /// The remote as the last poll found it: when, whether offline (since when, why), and the
    /// devices that wrote what it holds.
    public var remote: RemoteState?
}

/// The whole of run/uploads.json.
public struct UploadActivity: Codable, Sendable, Equatable {
    /// The daemon that wrote it: a file left by a dead daemon is ignored.
    public var pid: Int32
    public var stores: [StoreActivity]
    public var uploads: [InFlightUpload]
    public var indexWriteError: String?
}

extension DriveHome {
    public var activityPath: String { runPath + "/uploads.json" }

    /// Replaces run/uploads.json (temporary file and rename, no fsync: it describes the
    /// running process only, so a crash may lose it).
    func writeActivity(_ a: UploadActivity) {
        guard let data = try? JSONEncoder().encode(a) else { return }
        let tmp = activityPath + ".tmp"
        guard FileManager.default.createFile(atPath: tmp, contents: data, attributes: [.posixPermissions: 0o600]) else { return }
        if Glibc.rename(tmp, activityPath) != 0 { unlink(tmp) }
    }

    /// What the live daemon published, or nil when no daemon of this drive is running.
    public func liveActivity() -> UploadActivity? {
        guard let record = liveMountRecord(), let data = FileManager.default.contents(atPath: activityPath),
              let a = try? JSONDecoder().decode(UploadActivity.self, from: data), a.pid == record.pid else { return nil }
        return a
    }

    func removeActivity() {
        unlink(activityPath)
    }
}
