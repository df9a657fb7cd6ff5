// FileSystem+Changes: what the file system tells the uploader: which store paths changed.
import CDocDriveSys
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

extension DriveFileSystem {
    /// The path of a node inside its top-level folder ("" for the folder itself), or nil when
    /// the node is not in a store or its path cannot be known (deleted).
    func storePath(_ n: Inode) -> String? {
        guard let root = n.root, let uploader, uploader.uploads(root.key) else { return nil }
        guard let fd = try? n.acquire() else { return nil }
        defer { n.release() }
        return relativePath(fd: fd, root: root)
    }

    /// The store path of an open or O_PATH descriptor whose content lives in `root`.
    func storePath(fd: Int32, root: BackingRoot) -> String? {
        guard let uploader, uploader.uploads(root.key) else { return nil }
        return relativePath(fd: fd, root: root)
    }

    /// Tells the uploader that `name` in `parent` changed (saved, removed, renamed from or to).
    /// `removal`: `name` was removed, so the folder's path may come from `folderPaths`.
    func noteChanged(parent: Inode, name: UnsafePointer<CChar>, removal: Bool = false) {
        guard let uploader, let root = parent.root, uploader.uploads(root.key) else { return }
        let folder = removal ? folderPaths.path(of: parent.nodeID) { storePath(parent) } : storePath(parent)
        guard let dir = folder else { return }
        let n = String(cString: name)
        uploader.noteChanged(root: root.key, path: dir.isEmpty ? n : dir + "/" + n)
    }

    /// Tells the uploader that an open file's content was saved (at close or fsync); `links`
    /// is the file's link count, which the caller has already stat'ed.
    func noteSaved(_ file: OpenFile, links: UInt64?) {
        guard file.dirty.exchange(false, ordering: .relaxed), let uploader, let root = file.contentRoot,
              let path = storePath(fd: file.fd, root: root), !path.isEmpty else { return }
        uploader.noteChanged(root: root.key, path: path)
        if let links, links > 1 { uploader.noteSavedWithOtherNames(root: root.key) }
    }

    /// The user.docdrive.status of a node: synced, pending, uploading or failed.
    func uploadStatus(_ n: Inode) -> String? {
        if n.reference != nil {
            if let problem = referenceProblem(n) { return problem.rawValue }
            guard let uploader, let root = n.reference?.storeRoot, let t = try? referenceTarget(n),
                  let path = storePath(fd: t, root: root), !path.isEmpty else { return nil }
            return uploader.status(root: root.key, path: path)
        }
        guard let uploader, let root = n.root, uploader.uploads(root.key), let path = storePath(n), !path.isEmpty else { return nil }
        return uploader.status(root: root.key, path: path)
    }
}

/// Store paths of folders that files were just removed from. `rm -rf` removes thousands of
/// files per folder, and the note of each removal needs its folder's path (a readlink of
/// /proc/self/fd). A path is reused for up to 2 s unless a rename or a folder removal went
/// through the mount in between. A folder renamed behind the mount's back in that time is
/// harmless for a removal: its note only makes the uploader compare that path with the
/// remote, and nothing is at the old path any more. Saves never use these paths.
final class FolderPathCache: Sendable {
    private struct Entry {
        var path: String
        var generation: UInt64
        var time: Int64
    }
    /// By node id. Lock: leaf.
    private let entries = Mutex<[UInt64: Entry]>([:])
    private let generation = Atomic<UInt64>(0)
    private static let lifetimeNanoseconds: Int64 = 2_000_000_000
    private static let maxEntries = 256

    /// A rename or a folder removal went through the mount: every kept path may be wrong.
    func invalidate() {
        generation.add(1, ordering: .relaxed)
    }

    func path(of node: UInt64, compute: () -> String?) -> String? {
        let now = Self.monotonicNanoseconds()
        let gen = generation.load(ordering: .relaxed)
        if let e = entries.withLock({ $0[node] }), e.generation == gen, now - e.time < Self.lifetimeNanoseconds {
            return e.path
        }
        guard let path = compute() else { return nil }
        entries.withLock { m in
            if m.count >= Self.maxEntries { m.removeAll(keepingCapacity: true) }
            m[node] = Entry(path: path, generation: gen, time: now)
        }
        return path
    }

    private static func monotonicNanoseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }
}
