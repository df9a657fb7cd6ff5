// RemoteChanges: what the sync engine changed in a store's local copy on behalf of the remote
// (another device, or a foreign tool writing the bucket), published once as a typed value; the
// mount's kernel cache and the thumbnails subscribe. The mount's own changes go through
// ChangeFeed on the request thread.

/// One change the sync engine made in a store's local copy, published after it is made, on the
/// sync's worker thread.
public enum RemoteChange: Sendable, Equatable {
    /// `name` in the backing folder `folder` (a path) was made, replaced, renamed or removed
    /// behind the mount: the kernel's cached entry and attributes of it must go.
    case entry(folder: String, name: String)
    /// A file of another device arrived in the store `root` at `path` as the item `id`: as a
    /// placeholder, or `downloaded` (its picture then comes from the remote, RemotePictures).
    case arrived(root: String, path: StorePath, id: String, downloaded: Bool)
}

/// What follows the remote's changes. Called on a sync worker, which may hold a path lock of
/// the store: no wait for a FUSE request (a request may wait for that worker: a placeholder's
/// open waits for its download).
public protocol RemoteChangeSubscriber: AnyObject, Sendable {
    func changed(_ change: RemoteChange)
}

/// The remote's change stream of one drive. Made before the parts that publish into it (the sync
/// engine) and subscribe to it (the file system, once mounted): a change published before a
/// subscriber came has nothing to tell it (before the mount there is no kernel cache).
public final class RemoteChanges: Sendable {
    private let subscribers = WeakSubscribers<any RemoteChangeSubscriber>()

    public init() {}

    public func subscribe(_ s: any RemoteChangeSubscriber) { subscribers.add(s) }

    func publish(_ change: RemoteChange) { subscribers.forEach { $0.changed(change) } }
}
