// FileSystem+Changes: what the file system tells the uploader: which store paths changed.
import CDocDriveSys
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
    func noteChanged(parent: Inode, name: UnsafePointer<CChar>) {
        guard let uploader, let root = parent.root, uploader.uploads(root.key), let dir = storePath(parent) else { return }
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
