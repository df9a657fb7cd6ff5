// RemoteChange: what the sync engine changed in a store's local copy on behalf of the remote
// (another device, or a foreign tool writing the bucket), published once on the drive's stream
// (DriveChanges) as `.remote`: the item index, the status marks, the mount's kernel cache and the
// thumbnails subscribe.

/// One change the sync engine made in a store's local copy, published after it is made, on the
/// sync's worker thread.
public enum RemoteChange: Sendable, Equatable {
    /// The item index learns where an item of the local copy is now and which it is (a file or
    /// folder placed, renamed or removed by the sync; an id taken from another device).
    case item(ItemEvent)
    /// `path` of the store `root`, whose name is in the backing folder `folder` (a path), was
    /// made, replaced, renamed or removed behind the mount: the kernel's cached entry and
    /// attributes of it must go, and a file manager listening to the status socket is told.
    case entry(root: String, path: StorePath, folder: String)
    /// A file of another device arrived in the store `root` at `path` as the item `id`: as a
    /// placeholder, or `downloaded` (its picture then comes from the remote, RemotePictures).
    case arrived(root: String, path: StorePath, id: String, downloaded: Bool)
}
