// FileSystem+Changes: what the file system tells the uploader (which store paths changed), and
// what it does with the changes made behind the mount, by the sync engine and the document modes
// (DriveChanges).
import CDocDriveSys
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

extension DriveFileSystem {
    /// Where a node or descriptor is in its store.
    public enum StoreLocation: Sendable {
        case at(StorePath)
        /// Not in an uploaded store, deleted, or not findable.
        case unknown
        /// In the store, but at a path longer than the kernel gives back for a descriptor
        /// (PATH_MAX): the uploader compares the whole store to find what changed.
        case tooLong
    }

    /// The path of a node inside its top-level folder ("" for the folder itself), or nil when
    /// the node is not in a store or its path cannot be known (deleted).
    func storePath(_ n: Inode) -> StorePath? {
        guard case .at(let p) = storeLocation(n) else { return nil }
        return p
    }

    func storeLocation(_ n: Inode) -> StoreLocation {
        guard let root = n.root, sync.uploads(root.key) else { return .unknown }
        guard let fd = try? n.acquire() else { return .unknown }
        defer { n.release() }
        return storeLocation(fd: fd, root: root)
    }

    /// `SyncService.settleFill`, with a sentence in the log when the file's content cannot be
    /// written to the disk (the writable open or truncate then fails with EIO).
    func settleFill(_ sync: SyncService, root: BackingRoot, fd: Int32) -> Bool {
        if sync.onDemand.settleFill(root: root.key, fd: fd) { return true }
        let reason = String(cString: strerror(errno))
        let store = RootKey(root.key)?.storeName ?? root.key
        let what = storePath(fd: fd, root: root).map { "\(store)/\($0)" } ?? "a file of store \(store)"
        logger.warning("\(what) was downloaded a moment ago and cannot be written to the disk (\(reason)); it cannot be opened for writing or truncated until it can (EIO)")
        return false
    }

    /// The store path of an open or O_PATH descriptor whose content lives in `root`.
    func storePath(fd: Int32, root: BackingRoot) -> StorePath? {
        guard case .at(let p) = storeLocation(fd: fd, root: root) else { return nil }
        return p
    }

    /// Where the descriptor is inside `root`, as the bytes the kernel gives (a name that is not
    /// UTF-8 stays what it is: see StorePath). On the save path: the buffer is not zeroed and
    /// only the answer is copied.
    func storeLocation(fd: Int32, root: BackingRoot) -> StoreLocation {
        guard sync.uploads(root.key) else { return .unknown }
        return location(fd: fd, root: root)
    }

    /// Where the descriptor is inside `root` (any root: a store or a container), from the
    /// kernel's name of it; `.unknown` when outside it or deleted.
    func location(fd: Int32, root: BackingRoot) -> StoreLocation {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Int(PATH_MAX) + 1) { buf -> StoreLocation in
            let n = buf.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buf.count) {
                Int(dd_proc_path(fd, $0, buf.count))
            }
            guard n > 0 else { return dd_errno() == ENAMETOOLONG ? .tooLong : .unknown }
            var rootLength = 0
            let matches: Bool = root.path.utf8.withContiguousStorageIfAvailable { r in
                rootLength = r.count
                guard n >= r.count else { return false }
                return memcmp(buf.baseAddress!, r.baseAddress!, r.count) == 0
            } ?? false
            guard matches else { return .unknown }
            if n == rootLength { return .at(.store) }
            guard buf[rootLength] == UInt8(ascii: "/") else { return .unknown }
            let rel = UnsafeBufferPointer(rebasing: buf[(rootLength + 1)..<n])
            let deleted = " (deleted)".utf8
            if rel.count >= deleted.count, rel.suffix(deleted.count).elementsEqual(deleted) { return .unknown }
            return .at(StorePath(bytes: Array(rel)))
        }
    }

    /// Tells the uploader that `name` in `parent` changed (saved, removed, renamed from or to).
    /// `removal`: `name` was removed, so the folder's path may come from `folderPaths`.
    /// `made`: `name` is a folder just made (the uploader queues it only if it stays empty).
    func noteChanged(parent: Inode, name: UnsafePointer<CChar>, removal: Bool = false, made: Bool = false) {
        guard let root = parent.root, sync.uploads(root.key) else { return }
        let location = removal ? folderPaths.location(of: parent.nodeID) { storeLocation(parent) } : storeLocation(parent)
        switch location {
        case .at(let dir):
            sync.scheduler.noteChanged(root: root.key, path: dir.appending(UnsafeRawBufferPointer(start: name, count: strlen(name))), madeFolder: made)
        case .tooLong: sync.noteChangedSomewhere(root: root.key)
        case .unknown: return
        }
    }

    /// Where a saved file is in its store, found once for every subscriber of the save.
    func savedLocation(_ file: OpenFile) -> StoreLocation {
        guard let root = file.contentRoot else { return .unknown }
        return storeLocation(fd: file.fd, root: root)
    }

    /// Tells the upload scheduler that an open file's content was saved (at close or fsync) at
    /// `location`; `links` is the file's link count, which the caller has already stat'ed.
    func noteSaved(_ file: OpenFile, links: UInt64?, at location: StoreLocation) {
        guard let root = file.contentRoot else { return }
        switch location {
        case .at(let path) where !path.isEmpty:
            sync.scheduler.noteChanged(root: root.key, path: path)
            if let links, links > 1 { sync.noteSavedWithOtherNames(root: root.key) }
        case .tooLong: sync.noteChangedSomewhere(root: root.key)
        default: return
        }
    }

    /// The user.docdrive.status of a node: its FileState, or for a reference that cannot be
    /// followed, why (ReferenceProblem); nil outside the stores.
    func uploadStatus(_ n: Inode) -> String? {
        if n.reference != nil {
            if let problem = referenceProblem(n) { return problem.rawValue }
            guard let root = n.reference?.storeRoot, let t = try? referenceTarget(n),
                  let path = storePath(fd: t, root: root), !path.isEmpty else { return nil }
            let isFile = (try? Sys.stat(fd: t)).map { $0.st_mode & S_IFMT == S_IFREG } ?? false
            return sync.fileState(root: root.key, path: path, isFile: isFile,
                                      isPlaceholder: { Placeholder.version(fd: t) != nil }).rawValue
        }
        guard let root = n.root, sync.uploads(root.key) else { return nil }
        awaitReleases(of: n)
        switch storeLocation(n) {
        case .at(let path) where !path.isEmpty:
            return sync.fileState(root: root.key, path: path, isFile: n.fileType == S_IFREG, isPlaceholder: {
                guard let fd = try? n.acquire() else { return false }
                defer { n.release() }
                return Placeholder.version(fd: fd) != nil
            }).rawValue
        // Not "synced" of what cannot be looked up: the comparison it is part of says more.
        case .tooLong: return sync.storeState(root: root.key).rawValue
        default: return nil
        }
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
        var path: DriveFileSystem.StoreLocation
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

    func location(of node: UInt64, compute: () -> DriveFileSystem.StoreLocation) -> DriveFileSystem.StoreLocation {
        let now = Sys.monotonicNanoseconds()
        let gen = generation.load(ordering: .relaxed)
        if let e = entries.withLock({ $0[node] }), e.generation == gen, now - e.time < Self.lifetimeNanoseconds {
            return e.path
        }
        let path = compute()
        if case .unknown = path { return path }
        entries.withLock { m in
            if m.count >= Self.maxEntries { m.removeAll(keepingCapacity: true) }
            m[node] = Entry(path: path, generation: gen, time: now)
        }
        return path
    }
}

extension DriveFileSystem {
    /// A document that can have a picture was saved in a store: its thumbnail is made off the
    /// request threads (the item's id is looked up there too).
    func pictureSaved(root: BackingRoot, _ rel: String) {
        let backing = root.path + "/" + rel
        let shown = namespace.displayPath(rootKey: root.key, rel)
        let index = index
        let sync = sync, key = root.key
        thumbnails.saved(backing: backing, shown: shown, item: {
            var st = stat(), pst = stat()
            guard lstat(backing, &st) == 0, lstat((backing as NSString).deletingLastPathComponent, &pst) == 0 else { return nil }
            return try? index.itemID(root: root.key, ino: Int64(st.st_ino), parentIno: Int64(pst.st_ino),
                                     name: (rel as NSString).lastPathComponent, kind: .file)
        }, publish: { item, png in sync.onDemand.publishPicture(root: key, item: item, png) })
    }

    /// A document of another device arrived in a store: its picture comes from the store's
    /// remote, off the request threads.
    func pictureArrived(root key: String, _ path: StorePath, id: String, downloaded: Bool) {
        guard let rel = path.string, Thumbnailer.hasPicture(rel),
              let root = namespace.root(key: key) else { return }
        let sync = sync
        thumbnails.arrived(backing: root.path + "/" + rel, shown: namespace.displayPath(rootKey: key, rel), item: id,
                           downloaded: downloaded) { sync.onDemand.picture(root: key, item: id) }
    }
}

/// A document saved through the mount gets its picture; what the sync engine changed in the
/// local copies (on its worker) and what a document mode changed in a backing folder: the kernel
/// forgets its cached entry, and a document that arrived gets its picture.
extension DriveFileSystem: DriveChangeSubscriber {
    /// Not a file operation but a save: those are the kernel table's (KernelNodes).
    public var follows: DriveChangeKinds { [.saves, .remote, .documents] }

    public func changed(_ change: DriveChange) {
        switch change {
        case let .mount(.saved(file, _, .at(path)), _):
            // A saved document's picture, made off the request thread.
            if let root = file.contentRoot, let rel = path.string, Thumbnailer.hasPicture(rel) { pictureSaved(root: root, rel) }
        case .mount, .config:
            return  // the stream's first three subscribers (Changes/FileChange.swift), and the namespace
        case let .remote(.entry(_, path, folder)):
            // Before the mount there is no kernel cache to drop (a store just joined makes its
            // placeholders then, one change each).
            guard kernelInvalidation != nil else { return }
            let fd = Glibc.open(folder, dd_O_PATH | O_DIRECTORY | O_CLOEXEC)
            guard fd >= 0 else { return }
            defer { close(fd) }
            // Never waited for on the sync's worker: a request may hold the folder while it
            // waits for that worker (a placeholder's open, for its download).
            invalidateLater(folder: fd, name: String(decoding: path.lastName, as: UTF8.self))
        case let .remote(.arrived(root, path, id, downloaded)):
            pictureArrived(root: root, path, id: id, downloaded: downloaded)
        case .remote(.item):
            return
        case let .document(d, _):
            invalidateEntry(folder: d.folder, name: d.name)
        }
    }
}
