// FileState: the one state a file of the drive shows the user (its user.docdrive.status, the
// status socket's answer that the file manager's emblems come from), decided in one place.
public enum FileState: String, Sendable, CaseIterable {
    /// A store file whose content and remote agree.
    case synced
    /// Changed here, waiting for its upload (the write-back delay, or workers busy).
    case pending
    case uploading
    /// A placeholder whose content is being downloaded.
    case downloading
    /// A remote file whose content is not on this device.
    case placeholder
    /// A document with a conflict copy beside it, or that copy.
    case conflict
    /// Its upload failed (`docdrive status` says why).
    case failed
    /// In the drive but in no store (an app's own documents: nothing to sync).
    case local
    /// Not in this drive, or not there.
    case none

    /// Whether it changes by itself (the daemon looks at it again while someone listens).
    public var isPassing: Bool { self == .pending || self == .uploading || self == .downloading }

    /// The state of a store file, from what the drive knows of it. The first that holds wins:
    /// 1. `downloading`: a download fills it now;
    /// 2. `conflict`: it has a conflict copy beside it, or is one;
    /// 3. `pending`: a save of it is noted and not queued yet;
    /// 4. its upload queue entry's state (`synced` without one), except `pending` for a file
    ///    "synced" that has no record of being on the remote (`unrecorded`, asked only then: it
    ///    queues the file for a look);
    /// 5. and a placeholder (`isPlaceholder`, asked only for the three states below) shows
    ///    `placeholder` rather than synced, pending or uploading: its content is not here, it is
    ///    never uploaded, and a queued look at it is a comparison only.
    public static func ofStoreFile(filling: Bool, inConflict: Bool, noted: Bool, queued: UploadState?,
                            unrecorded: () -> Bool, isPlaceholder: () -> Bool) -> FileState {
        if filling { return .downloading }
        if inConflict { return .conflict }
        var state: FileState
        if noted {
            state = .pending
        } else {
            switch queued ?? .synced {
            case .synced: state = unrecorded() ? .pending : .synced
            case .pending: state = .pending
            case .uploading: state = .uploading
            case .failed: state = .failed
            }
        }
        if state == .synced || state == .pending || state == .uploading, isPlaceholder() { state = .placeholder }
        return state
    }

    /// The state of a store as a whole (a file whose path is too long to look up shows it):
    /// pending while anything of it waits (its comparison with the remote included), else synced.
    public static func ofStore(waiting: Int) -> FileState { waiting > 0 ? .pending : .synced }
}
