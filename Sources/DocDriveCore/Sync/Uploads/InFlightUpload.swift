// InFlightUpload: a file being copied to or from its remote now, with its progress: kept in the
// uploader's memory while it lasts, shown by `docdrive status` (DriveStatus).

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
    public var direction: TransferDirection

    public init(store: String, path: String, done: Int64, total: Int64, direction: TransferDirection = .up) {
        self.store = store
        self.path = path
        self.done = done
        self.total = total
        self.direction = direction
    }

    public var isDownload: Bool { direction == .down }
}
