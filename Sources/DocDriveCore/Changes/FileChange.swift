// FileChange: what a mutating file operation changed, published once on the drive's
// stream (DriveChanges), and the three subscribers every stream has: the kernel's node table, the
// item index and the upload scheduler.
#if canImport(Glibc)
import Glibc
#endif

/// One change a file operation made, published after it succeeded. Names and nodes are the
/// operation's own and live only for the call: a subscriber copies what it keeps.
public enum FileChange {
    /// `name` was made in `parent`: a file at create (its content is a `.saved` at close), a
    /// folder, a symlink or a special file. `reclaiming`: the inode number of the file renamed
    /// away from `name` a moment ago, whose document the new file continues (an editor's
    /// rename-away save, see FileSystem+Saves).
    case created(parent: Inode, name: UnsafePointer<CChar>, ino: UInt64, kind: ItemKind, reclaiming: UInt64?)
    /// A new hard link `name` in `parent`.
    case linked(parent: Inode, name: UnsafePointer<CChar>)
    /// `name` in `parent` is gone; `st` is what it was.
    case removed(parent: Inode, name: UnsafePointer<CChar>, st: stat)
    /// `name` in `from` is now `newName` in `to`; `dst` is what was at the new name before
    /// (replaced, or swapped with when `exchange`).
    case renamed(from: Inode, name: UnsafePointer<CChar>, to: Inode, newName: UnsafePointer<CChar>,
                 src: stat, dst: stat?, exchange: Bool)
    /// A file's size was set by path (truncate(2)); `fd` is the node's descriptor.
    case truncated(fd: Int32, root: BackingRoot)
    /// An open file's content was saved (close, flush, fsync); `links`: its link count; `at`:
    /// where it is in its store (found once, for the upload scheduler and the pictures).
    case saved(OpenFile, links: UInt64?, at: DriveFileSystem.StoreLocation)
    /// A save onto a reference entry (see `saveThroughReference`): the file `src` of `parent`
    /// became the reference's target, `name` at `path` in `store` (folder inode `folderIno`),
    /// replacing the file `oldTarget`; the saved file's inode number is now `newIno` (another
    /// one when it had to be copied across filesystems).
    case savedThroughReference(parent: Inode, src: stat, store: BackingRoot, path: String, name: String,
                               oldTarget: stat, newIno: Int64, folderIno: Int64)
}

extension DriveFileSystem {
    /// Publishes a change an operation made (see DriveChanges).
    @inline(__always)
    func publish(_ change: FileChange) {
        changes.publish(.mount(change, in: self))
    }
}

/// The kernel's view: nodes of removed, renamed and replaced files, the folder-path cache, the
/// references' identity generation.
struct KernelNodes: DriveChangeSubscriber {
    var follows: DriveChangeKinds { .mount }

    func changed(_ change: DriveChange) {
        guard case let .mount(change, fs) = change else { return }
        switch change {
        case .created(_, _, _, _, let reclaiming):
            if reclaiming != nil { fs.identityChanges.add(1, ordering: .relaxed) }
        case .linked, .truncated, .saved:
            return
        case let .removed(p, _, st):
            let folder = st.st_mode & S_IFMT == S_IFDIR
            if folder { fs.folderPaths.invalidate() }
            if folder || st.st_nlink <= 1 { fs.table.removed(view: p.view, dev: UInt64(st.st_dev), ino: UInt64(st.st_ino)) }
        case let .renamed(p, name, np, newName, src, dst, exchange):
            fs.folderPaths.invalidate()
            // Nodes not opened yet follow by name (an opened node's descriptor follows by itself).
            fs.table.seen(view: p.view, dev: UInt64(src.st_dev), ino: UInt64(src.st_ino), at: np, newName)
            guard let dst else { return }
            if exchange {
                fs.table.seen(view: p.view, dev: UInt64(dst.st_dev), ino: UInt64(dst.st_ino), at: p, name)
            } else if dst.st_ino != src.st_ino, dst.st_nlink <= 1 {
                // Replaced (its last name): as for a removal, its forgotten node's handles go
                // stale, and a live node lets go of its descriptor unless in use, so that the
                // space is freed now (an editor's save of a large document), not at FORGET.
                fs.table.removed(view: p.view, dev: UInt64(dst.st_dev), ino: UInt64(dst.st_ino))
            }
        case let .savedThroughReference(_, src, _, _, _, oldTarget, _, _):
            fs.folderPaths.invalidate()
            // The saved file's node, which the kernel now shows under the reference's name, and
            // the old target's nodes are no longer what the kernel thinks: both answer ESTALE,
            // so the kernel looks the names up again and finds the reference and the new target.
            fs.table.replacedBehind(dev: UInt64(src.st_dev), ino: UInt64(src.st_ino))
            fs.table.replacedBehind(dev: UInt64(oldTarget.st_dev), ino: UInt64(oldTarget.st_ino))
            fs.identityChanges.add(1, ordering: .relaxed)
        }
    }
}

/// The item index: ids for new items, kept across renames and editors' saves, and the places the
/// sync engine gave items of the remote.
struct IndexRecorder: DriveChangeSubscriber {
    let index: ItemIndex
    var follows: DriveChangeKinds { [.mount, .remote] }

    func changed(_ change_: DriveChange) {
        let change: FileChange
        switch change_ {
        case .mount(let c, _): change = c
        case .remote(.item(let event)): index.record(event); return
        case .remote, .document, .config: return
        }
        switch change {
        case let .created(parent, name, ino, kind, reclaiming):
            if let reclaiming {
                index.record(.reclaimed(root: parent.root!.key, ino: Int64(ino), fromIno: Int64(reclaiming),
                                        parentIno: Int64(parent.ino), name: String(cString: name)))
            } else {
                index.record(.created(root: parent.root!.key, ino: Int64(ino), parentIno: Int64(parent.ino),
                                      name: String(cString: name), kind: kind))
            }
        case .linked, .truncated, .saved:
            return
        case let .removed(p, _, st):
            if st.st_nlink <= 1 || st.st_mode & S_IFMT == S_IFDIR { index.record(.removed(root: p.root!.key, ino: Int64(st.st_ino))) }
        case let .renamed(p, name, np, newName, src, dst, exchange):
            let root = p.root!.key
            index.record(.renamed(root: root, ino: Int64(src.st_ino), parentIno: Int64(np.ino), name: String(cString: newName)))
            guard let dst, dst.st_ino != src.st_ino else { return }
            if exchange {
                index.record(.renamed(root: root, ino: Int64(dst.st_ino), parentIno: Int64(p.ino), name: String(cString: name)))
            } else if dst.st_nlink <= 1, dst.st_mode & S_IFMT == S_IFREG, src.st_mode & S_IFMT == S_IFREG {
                // Save-by-rename: the new file is the same document, with the same id.
                index.record(.replaced(root: root, ino: Int64(src.st_ino), oldIno: Int64(dst.st_ino),
                                       parentIno: Int64(np.ino), name: String(cString: newName)))
            } else if dst.st_nlink <= 1 || dst.st_mode & S_IFMT == S_IFDIR {
                index.record(.removed(root: root, ino: Int64(dst.st_ino)))
            }
        case let .savedThroughReference(p, src, store, _, name, oldTarget, newIno, folderIno):
            index.record(.removed(root: p.root!.key, ino: Int64(src.st_ino)))
            index.record(.replaced(root: store.key, ino: newIno, oldIno: Int64(oldTarget.st_ino), parentIno: folderIno, name: name))
        }
    }
}

/// The upload scheduler: which store paths changed, through the mount (see FileSystem+Changes) or
/// by a document mode.
struct UploadNotes: DriveChangeSubscriber {
    var follows: DriveChangeKinds { [.mount, .documents] }

    func changed(_ change_: DriveChange) {
        let change: FileChange, fs: DriveFileSystem
        switch change_ {
        case let .mount(c, f): (change, fs) = (c, f)
        case let .document(d, fs):
            fs.sync.scheduler.noteChanged(root: d.root.key, path: d.rel)  // nothing for an app's container
            return
        case .remote, .config: return
        }
        let sync = fs.sync
        switch change {
        case let .created(parent, name, _, kind, _):
            // A file is noted when it is saved (closed); a folder, a link or a fifo has no save:
            // it is noted now, so that an empty folder and a link reach the remote.
            if kind != .file { fs.noteChanged(parent: parent, name: name, made: kind == .directory) }
        case let .linked(parent, name):
            fs.noteChanged(parent: parent, name: name)
        case let .removed(parent, name, _):
            fs.noteChanged(parent: parent, name: name, removal: true)
        case let .renamed(p, name, np, newName, _, _, _):
            fs.noteChanged(parent: p, name: name)
            fs.noteChanged(parent: np, name: newName)
        case let .truncated(fd, root):
            if let p = fs.storePath(fd: fd, root: root), !p.isEmpty { sync.scheduler.noteChanged(root: root.key, path: p) }
        case let .saved(file, links, location):
            fs.noteSaved(file, links: links, at: location)
        case let .savedThroughReference(_, _, store, path, _, _, _, _):
            sync.scheduler.noteChanged(root: store.key, path: path)
        }
    }
}
