// DriveChanges: the drive's one stream of changes. Every change to what the drive holds, whatever
// made it, is published here once, as a typed value that says where it came from; the parts that
// follow changes subscribe, in one order written down here. Nobody wires a side effect by hand.
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// One change, published after it was made, with its origin.
public enum DriveChange {
    /// Through the mount, by a file operation, on the FUSE request thread that made it (see
    /// FileChange: its names and nodes live only for the call).
    case mount(FileChange, in: DriveFileSystem)
    /// By the sync engine in a store's local copy, on behalf of the remote (another device, a
    /// foreign tool writing the bucket), on the sync's worker.
    case remote(RemoteChange)
    /// By a document mode (open, import, move, export, app close), on the control thread that
    /// runs it.
    case document(DocumentChange, in: DriveFileSystem)
    /// config.yaml changed and parses (ConfigWatch: a `docdrive store add`, `app add`, an
    /// editor), on the thread whose check noticed it, with no lock of the drive held.
    case config(DriveConfig, mtime: timespec)
}

extension DriveChange {
    /// Which kind of change this is, for the subscribers that follow only some (`follows`).
    @inline(__always)
    public var kind: DriveChangeKinds {
        switch self {
        case .mount(.saved, _): .saves
        case .mount: .fileOperations
        case .remote: .remote
        case .document: .documents
        case .config: .config
        }
    }
}

/// The kinds of change a subscriber follows (`DriveChangeSubscriber.follows`). A subscriber is
/// never called for a change of a kind it does not follow: the stream looks at the kind before it
/// touches the subscriber (a weakly held one is not even loaded), so that a mount operation costs
/// nothing in the parts that follow only a new config.
public struct DriveChangeKinds: OptionSet, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// `.mount`, but a save.
    public static let fileOperations = DriveChangeKinds(rawValue: 1)
    /// `.mount(.saved)`: a file's content saved through the mount.
    public static let saves = DriveChangeKinds(rawValue: 2)
    public static let remote = DriveChangeKinds(rawValue: 4)
    public static let documents = DriveChangeKinds(rawValue: 8)
    public static let config = DriveChangeKinds(rawValue: 16)
    public static let mount: DriveChangeKinds = [.fileOperations, .saves]
    public static let all: DriveChangeKinds = [.mount, .remote, .documents, .config]
}

/// A name a document mode made, replaced or removed in a backing folder.
public struct DocumentChange {
    /// The top-level folder (an app's container folder, or a store's local copy).
    public let root: BackingRoot
    /// The changed name's path inside `root`.
    public let rel: String
    /// The backing folder the name is in (open for the call) and the name.
    public let folder: Int32
    public let name: String
}

/// What follows the drive's changes. Called on the publishing thread; by origin:
/// * `.mount`: a FUSE request thread: no wait for the network, a transaction, or a lock that is
///   not a leaf;
/// * `.remote`: a sync worker, which may hold a path lock of the store: no wait for a FUSE request
///   (a request may wait for that worker: a placeholder's open waits for its download);
/// * `.document`: a control thread, after the mode's system calls;
/// * `.config`: the thread that noticed the change (ConfigWatch), no lock of the drive held.
public protocol DriveChangeSubscriber: Sendable {
    /// The kinds of change this subscriber is called for, read once when it subscribes.
    var follows: DriveChangeKinds { get }
    func changed(_ change: DriveChange)
}

extension DriveChangeSubscriber {
    public var follows: DriveChangeKinds { .all }
}

/// The stream. Its subscribers, told in this order:
/// 1. `KernelNodes`: the mount's node table and its caches of paths and identities, so that
///    every later reader (the kernel's next lookup, a reference's target) sees the new names;
/// 2. `IndexRecorder`: the item index (ids follow renames, saves, and what the sync placed), before
/// 3. `UploadNotes`: the upload scheduler, whose workers read the index for the items they sync;
/// 4. the status marks (the desktop's status socket), subscribed by `Drive`;
/// 5. the file system (once made): the kernel's cached entries of what changed behind the mount,
///    and the pictures of documents saved here or arrived from another device;
/// 6. the namespace, then the sync service: a new config shows in the mount (a store added) before
///    its store's sync starts;
/// 7. whatever the drive's maker added (tests; the daemon's query index, after the sync).
/// Each is told only the kinds of change it `follows` (the file system: saves, the sync's and the
/// document modes' changes; the namespace, the sync service and the query index: a new config).
/// 1 to 3 are part of every stream (an id the sync gives an item must reach the index even when no
/// file system was made); 4 to 7 subscribe when their part is made. A change published before a
/// part subscribed has nothing to tell it (before the mount there is no kernel cache).
public final class DriveChanges: Sendable {
    private struct Entry: @unchecked Sendable {
        /// The subscriber's `follows`, kept here: checked before the subscriber is touched.
        let follows: DriveChangeKinds
        let strong: (any DriveChangeSubscriber)?
        /// A part that owns the stream through its parts (the file system) is held weakly.
        weak var weak: (any DriveChangeSubscriber & AnyObject)?
    }
    /// Lock: leaf, copied out before the subscribers are told (an array's copy is one retain).
    private let subscribers: Mutex<[Entry]>

    public init(index: ItemIndex) {
        let first: [any DriveChangeSubscriber] = [KernelNodes(), IndexRecorder(index: index), UploadNotes()]
        subscribers = Mutex(first.map { Entry(follows: $0.follows, strong: $0, weak: nil) })
    }

    /// Adds `s` after the subscribers already there.
    public func subscribe(_ s: any DriveChangeSubscriber) {
        subscribers.withLock { $0.append(Entry(follows: s.follows, strong: s, weak: nil)) }
    }

    /// Adds `s`, held weakly (a part that holds the stream), after the subscribers already there.
    public func subscribeWeakly(_ s: any DriveChangeSubscriber & AnyObject) {
        subscribers.withLock { $0.append(Entry(follows: s.follows, strong: nil, weak: s)) }
    }

    @inline(__always)
    public func publish(_ change: DriveChange) {
        let kind = change.kind
        for e in subscribers.withLock({ $0 }) where e.follows.contains(kind) {
            if let s = e.strong { s.changed(change) } else if let s = e.weak { s.changed(change) }
        }
    }
}
