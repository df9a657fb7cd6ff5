// SyncDecision: what to do with one item of a shared store, from what this device holds, what it
// last agreed with the remote (the base) and what the remote holds: one pure function (DESIGN.md 9).
import Foundation

/// One side's version of an item: where it is and which version it is.
public struct SyncEntry: Equatable, Sendable {
    public enum Kind: String, Equatable, Sendable { case file, folder, symlink }
    /// The item's path inside its store.
    public var path: String
    public var kind: Kind
    /// The side's own version token (local: size, mtime and ctime; remote: its version token,
    /// an ETag or a folder remote's size, mtime and hash). Folders: "" (a folder has no content).
    public var token: String
    /// SHA-256 of the content when known: two sides with the same hash hold the same version.
    public var hash: String?
    /// The remote side only: the version this one was written over, where the remote says
    /// (`RemoteMeta.parent`), given for a version of the base's item (the same item id), and
    /// `RemoteMeta.created` for a create of any item.
    public var parent: String?

    public init(path: String, kind: Kind = .file, token: String, hash: String? = nil, parent: String? = nil) {
        self.path = path
        self.kind = kind
        self.token = token
        self.hash = hash
        self.parent = parent
    }
}

/// What this device and the remote last agreed on for an item (the base-version table's row).
public struct SyncBase: Equatable, Sendable {
    public var path: String
    public var kind: SyncEntry.Kind
    /// The local version when the two sides last agreed.
    public var localToken: String
    /// The remote version last seen; every write and delete on the remote is conditional on it.
    public var remoteToken: String
    /// The version `remoteToken` was written over, where the remote says (`RemoteMeta.parent`).
    public var parent: String?
    /// `remoteToken` is this device's own create (written where nothing was), and no listing
    /// of the remote has shown it yet.
    public var unlistedCreate: Bool

    public init(path: String, kind: SyncEntry.Kind = .file, localToken: String, remoteToken: String, parent: String? = nil,
                unlistedCreate: Bool = false) {
        self.path = path
        self.kind = kind
        self.localToken = localToken
        self.remoteToken = remoteToken
        self.parent = parent
        self.unlistedCreate = unlistedCreate
    }
}

/// Everything the decision looks at for one item (matched across the sides by its item id, or
/// by path for an item one side does not know yet).
public struct SyncItem: Equatable, Sendable {
    public var local: SyncEntry?
    public var base: SyncBase?
    public var remote: SyncEntry?
    /// The local copy is dirty (saved, not uploaded yet), open for writing or write-locked: a
    /// remote change must never overwrite it.
    public var localBusy: Bool
    /// A folder only: something under it changed on this device since the base (a new file in
    /// a folder deleted on the remote) or on the remote (the other way round). A change wins
    /// over a delete: the folder stays.
    public var changedInsideLocally: Bool
    public var changedInsideRemotely: Bool
    /// The local copy is a placeholder: it stands for the base's version without its content.
    public var localIsPlaceholder: Bool

    public init(local: SyncEntry?, base: SyncBase?, remote: SyncEntry?, localBusy: Bool = false,
                changedInsideLocally: Bool = false, changedInsideRemotely: Bool = false, localIsPlaceholder: Bool = false) {
        self.local = local
        self.base = base
        self.remote = remote
        self.localBusy = localBusy
        self.changedInsideLocally = changedInsideLocally
        self.changedInsideRemotely = changedInsideRemotely
        self.localIsPlaceholder = localIsPlaceholder
    }
}

/// What to do. A plan is at most one rename, then at most one content action.
public struct SyncPlan: Equatable, Sendable, CustomStringConvertible {
    public enum Move: Equatable, Sendable {
        /// Renamed on the remote: rename the local copy to the remote's path.
        case local(to: String)
        /// Renamed here: rename the remote item to the local path (conditional on its version).
        case remote(to: String)
    }

    public enum Action: Equatable, Sendable {
        /// Both sides agree.
        case none
        /// Both sides hold the same version and no base says so yet: record the base only.
        case adopt
        /// Upload the local version: create-only when the remote has none, else if-version.
        case upload
        /// Download the remote version (temp name, then renamed into place under a writing intent).
        case download
        /// Delete the remote item, conditional on the base's remote version.
        case deleteRemote
        /// Delete the local copy (it is unchanged since the base).
        case deleteLocal
        /// Both sides deleted it: drop the base.
        case forget
        /// Both sides changed it: the local copy stays (and is uploaded over the version just
        /// seen); the remote version is kept beside it as a conflict copy.
        case conflict
    }

    public var move: Move?
    public var action: Action

    public init(_ action: Action, move: Move? = nil) {
        self.action = action
        self.move = move
    }

    public var description: String {
        switch move {
        case .none: "\(action)"
        case .local(let to)?: "move local to \(to), then \(action)"
        case .remote(let to)?: "move remote to \(to), then \(action)"
        }
    }
}

public enum SyncDecision {
    /// The one decision function: a comparison of local, base and remote. Deletes lose to
    /// changes; a version this device has not seen is never overwritten or deleted (the caller
    /// makes every remote write conditional on `base.remoteToken`); a busy local copy is never
    /// overwritten by the remote.
    public static func decide(_ s: SyncItem) -> SyncPlan {
        guard let base = s.base else { return decideWithoutBase(s) }
        // Renames first (matched by item id): the side that renamed tells the other.
        var move: SyncPlan.Move?
        if let l = s.local, let r = s.remote {
            if r.path != base.path {
                if l.path != r.path { move = .local(to: r.path) }  // renamed there (or on both sides: the remote's name wins)
            } else if l.path != base.path {
                move = .remote(to: l.path)  // renamed here
            }
        }
        let localGone = s.local == nil
        let remoteGone = s.remote == nil
        let localChanged = localGone || s.local!.token != base.localToken || s.local!.kind != base.kind
        let remoteChanged = remoteGone || s.remote!.token != base.remoteToken || s.remote!.kind != base.kind
        switch (localChanged, remoteChanged) {
        case (false, false):
            return SyncPlan(.none, move: move)
        case (true, false):
            if localGone {
                // Deleted here; a folder whose content changed on the remote comes back.
                return SyncPlan(s.changedInsideRemotely ? .download : .deleteRemote)
            }
            return SyncPlan(.upload, move: move)
        case (false, true):
            if remoteGone {
                // Deleted there: unless something changed here (a busy file, a new file inside a
                // folder), which wins and goes back up.
                if s.localBusy || s.changedInsideLocally { return SyncPlan(.upload) }
                return SyncPlan(.deleteLocal)
            }
            // The base's version replaced unseen (a race the server let both writes win): this
            // device's copy of it stays and goes up again, theirs is kept as a conflict copy. A
            // placeholder has no content to keep: the remote's version comes.
            if s.localBusy || (!s.localIsPlaceholder && (replacedUnseen(base, s.remote!) || createdOver(base, s.remote!))) {
                return SyncPlan(.conflict, move: move)
            }
            return SyncPlan(.download, move: move)
        case (true, true):
            switch (localGone, remoteGone) {
            case (true, true): return SyncPlan(.forget)
            case (true, false): return SyncPlan(.download)  // deleted here, changed there: the change wins
            case (false, true): return SyncPlan(.upload)    // changed here, deleted there: the change wins
            case (false, false):
                let l = s.local!, r = s.remote!
                if l.kind == .folder, r.kind == .folder { return SyncPlan(.adopt, move: move) }
                if let lh = l.hash, lh == r.hash, l.kind == r.kind { return SyncPlan(.adopt, move: move) }
                return SyncPlan(.conflict, move: move)
            }
        }
    }

    /// Whether the remote version `r` was written over the version the base's was written over,
    /// not over the base's: two writes conditional on one version both succeeded (a server
    /// whose conditional writes do not exclude each other), and the base's version, which this
    /// device holds, was replaced by a writer that never saw it. Not for creates (a file deleted
    /// and made again elsewhere looks the same), nor when the base's write kept its parent's
    /// ETag (the same bytes saved again: a later write over it names that ETag too).
    static func replacedUnseen(_ base: SyncBase, _ r: SyncEntry) -> Bool {
        guard base.kind == .file, r.kind == .file, let p = r.parent, p != RemoteMeta.created,
              p == base.parent, p != base.remoteToken, r.token != base.remoteToken else { return false }
        return true
    }

    /// Whether the remote version `r` is another create at the path of this device's own create
    /// (the base's version), which no listing showed before `r` took its place: two creates of
    /// one name, each conditional on nothing being there, both succeeded (a server whose
    /// conditional writes do not exclude each other), and this device's file, which it still
    /// holds, was replaced by a writer that never saw it. Once a listing has shown this
    /// device's file, a create in its place comes after a delete of it (whoever deleted it saw
    /// it), and is downloaded as any change.
    static func createdOver(_ base: SyncBase, _ r: SyncEntry) -> Bool {
        base.unlistedCreate && base.kind == .file && r.kind == .file && r.parent == RemoteMeta.created && r.token != base.remoteToken
    }

    /// No base: the item is new on one side, or on both (created on two devices under one name).
    private static func decideWithoutBase(_ s: SyncItem) -> SyncPlan {
        switch (s.local, s.remote) {
        case (nil, nil): return SyncPlan(.none)
        case (_?, nil): return SyncPlan(.upload)  // create-only on the remote
        case (nil, _?): return SyncPlan(.download)
        case let (l?, r?):
            if l.kind == .folder, r.kind == .folder { return SyncPlan(.adopt) }
            if let lh = l.hash, lh == r.hash, l.kind == r.kind { return SyncPlan(.adopt) }
            return SyncPlan(.conflict)
        }
    }

    /// What every conflict copy's name holds, before the device's name and the time.
    public static let conflictMark = " (conflict from "

    /// The name of a conflict copy of `path`, written by `device` at `date` (UTC):
    /// `NAME (conflict from DEVICE YYYY-MM-DD HH.MM.SS).EXT`, in the same folder. A device name
    /// is cleaned of slashes and NULs; the name is shortened to fit 255 bytes.
    public static func conflictPath(_ path: String, device: String, date: Date) -> String {
        let (folder, name) = splitPath(path)
        var stem = name, ext = ""
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            stem = String(name[..<dot])
            ext = String(name[dot...])
        }
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd HH.mm.ss"
        let who = String(device.map { $0 == "/" || $0 == "\u{0}" ? "_" : $0 })
        let tag = conflictMark + "\(who) \(f.string(from: date)))"
        while (stem + tag + ext).utf8.count > Names.maxNameBytes, !stem.isEmpty { stem.removeLast() }
        let out = stem + tag + ext
        return folder.isEmpty ? out : folder + "/" + out
    }

    /// The document a conflict copy's path was made from (the inverse of `conflictPath`), or
    /// nil when the name is not a conflict copy's.
    public static func originalOfConflictCopy(_ path: String) -> String? { conflictCopy(path)?.original }

    /// The document a conflict copy's path was made from and the device whose version the copy
    /// holds (the inverse of `conflictPath`; the " 2", " 3"... of a second copy in the same
    /// second is not part of the device's name), or nil when the name is not a conflict copy's.
    public static func conflictCopy(_ path: String) -> (original: String, device: String)? {
        guard let open = path.range(of: conflictMark, options: .backwards) else { return nil }
        let rest = path[open.upperBound...]
        // "DEVICE YYYY-MM-DD HH.MM.SS)": the first date and time followed by ")" ends it (a
        // device name may hold parentheses).
        guard let stamp = rest.range(of: #" \d{4}-\d{2}-\d{2} \d{2}\.\d{2}\.\d{2}\)"#, options: .regularExpression),
              stamp.lowerBound > rest.startIndex else { return nil }
        var device = rest[..<stamp.lowerBound]
        if let n = device.range(of: #" \d+$"#, options: .regularExpression), n.lowerBound > device.startIndex {
            device = device[..<n.lowerBound]
        }
        return (String(path[..<open.lowerBound]) + String(rest[stamp.upperBound...]), String(device))
    }

    static func splitPath(_ path: String) -> (folder: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return ("", path) }
        return (String(path[..<slash]), String(path[path.index(after: slash)...]))
    }
}
