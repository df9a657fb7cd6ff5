// FileSystem+Open: open files: opening (and filling placeholders first), reads and writes, flush, release, fsync.
import CDocDriveSys
import Logging
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// An open backing file; the adapter keeps it in the FUSE file handle.
public final class OpenFile: Sendable {
    public let fd: Int32
    public let inode: Inode
    /// Where the content lives: the node's root, or a reference's store (uploads go there).
    let contentRoot: BackingRoot?
    /// The caller asked for O_DIRECT (the kernel then sends this handle's I/O straight to us).
    public let directIO: Bool
    /// The page cache still holds this content: the kernel need not drop it at open.
    public let keepCache: Bool
    /// Written since the last save was noted (set by every write, taken at close and fsync).
    let dirty = Atomic<Bool>(false)
    /// Opened for writing (O_WRONLY or O_RDWR).
    public let writable: Bool
    /// Opened for reading too: only such a file can be mapped shared and writable, so only
    /// its mapping can change it after its last close.
    let readable: Bool
    /// The kernel writes this file's backing file itself (FUSE passthrough): its writes never
    /// reach `write`, so a save is noticed by the file's version changing (`noticeBypassedWrites`).
    let writesBypass = Atomic<Bool>(false)
    /// The file's version when it was opened, then when last checked. Lock: leaf.
    let seenVersion: Mutex<FileVersion?>
    /// The kernel sends no FLUSH at its closes (FOPEN_NOFLUSH): what a close notes, the last
    /// close's RELEASE notes, and the POSIX locks last taken through it go then too (the lock
    /// table drops an owner's locks with the open file its last request came through). Only a
    /// file that CREATE has just made is opened so (`create(noFlush:)`): nobody else has it open
    /// through the mount, so no lock on it can be another descriptor's.
    public let noFlush: Bool
    /// A POSIX lock was taken through this `noFlush` file (counted in `noFlushLockHolders`).
    let tookLocks = Atomic<Bool>(false)
    /// Where this file counts itself open while it is (the drive's).
    let openFiles: OpenFiles

    init(fd: Int32, inode: Inode, flags: Int32, version: FileVersion?, directIO: Bool, keepCache: Bool,
         contentRoot: BackingRoot? = nil, noFlush: Bool = false, openFiles: OpenFiles) {
        self.openFiles = openFiles
        self.noFlush = noFlush
        self.fd = fd
        self.inode = inode
        self.contentRoot = contentRoot ?? inode.root
        self.directIO = directIO
        self.keepCache = keepCache
        self.writable = flags & O_ACCMODE != O_RDONLY
        self.readable = flags & O_ACCMODE != O_WRONLY
        inode.noteOpened()
        openFiles.opened(inode, writable: writable)
        self.seenVersion = Mutex(version)
    }

    deinit {
        openFiles.closed(inode, writable: writable)
        inode.noteClosed()
    }
}

extension DriveFileSystem {
    /// Flags for the backing open: the kernel's writeback cache may read a write-only file and
    /// appends itself; O_DIRECT is not passed on (FUSE's buffers are not aligned for it).
    func backingOpenFlags(_ flags: Int32) -> (Int32, Bool) {
        var f = flags & ~(O_CREAT | O_EXCL | O_NOCTTY | Sys.O_NOFOLLOW)
        let direct = f & Sys.O_DIRECT != 0
        f &= ~Sys.O_DIRECT
        if options.writebackCache {
            if f & O_ACCMODE == O_WRONLY { f = (f & ~O_ACCMODE) | O_RDWR }
            f &= ~O_APPEND
        }
        return (f, direct)
    }

    /// `caller`: who opens (a truncating open by anyone but root drops setuid/setgid, as the
    /// kernel does for a native open(O_TRUNC); with atomic O_TRUNC it leaves that to us).
    public func open(_ id: UInt64, flags: Int32, caller: Caller? = nil) throws(Errno) -> OpenFile {
        switch try openOrFill(id, flags: flags, caller: caller) {
        case .opened(let f): return f
        case .placeholder: throw .ioError
        }
    }

    /// What an open found: the open file, or a placeholder whose content must come first
    /// (`fill`, then open again).
    public enum OpenOutcome {
        case opened(OpenFile)
        case placeholder(root: String, path: StorePath)
    }

    /// Opens the file, unless it is a placeholder (Sync/Placeholder.swift) that the open needs
    /// the content of: an open with O_TRUNC for writing makes it an empty file of the user's.
    public func openOrFill(_ id: UInt64, flags: Int32, caller: Caller? = nil) throws(Errno) -> OpenOutcome {
        let n = try backing(id)
        if n.isDirectory { throw .isDirectory }
        let (f, direct) = backingOpenFlags(flags)
        let (nfd, contentRoot) = try acquireContent(n)
        defer { n.release() }
        // noatime: a read moves no access time (Sys.reopenQuietly).
        let fd = try Sys.check { options.accessTimes.filesKept ? Sys.reopenQuietly(nfd, f) : dd_reopen(nfd, f) }
        // Only a store's file can be a placeholder: an app's files cost no extra system call.
        let mark = n.fileType == S_IFREG && (contentRoot ?? n.root)?.isStore == true ? Placeholder.mark(openFD: fd) : nil
        // Filled in this boot, its content not known to be on the disk yet: made durable before
        // it can become the user's file (Sync/FillCommits.swift).
        if case .filled = mark, flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0 {
            guard let root = contentRoot ?? n.root, settleFill(sync, root: root, fd: fd) else {
                Sys.close(fd)
                throw .ioError
            }
        }
        if case .placeholder = mark {
            if flags & O_TRUNC != 0, flags & O_ACCMODE != O_RDONLY {
                // The user's empty file now, unless it is being downloaded (ahead, or for a
                // reader): then the open waits for that download, and truncates after it.
                let clear = { _ = Placeholder.clear(fd: fd) }
                if let root = contentRoot ?? n.root, let path = storePath(fd: nfd, root: root), !path.isEmpty {
                    if !sync.onDemand.takePlaceholder(root: root.key, path: path, clear) {
                        Sys.close(fd)
                        return .placeholder(root: root.key, path: path)
                    }
                } else {
                    clear()
                }
            } else {
                Sys.close(fd)
                guard let root = contentRoot ?? n.root, let path = storePath(fd: nfd, root: root), !path.isEmpty,
                      sync.uploads(root.key) else { throw .ioError }
                if let pid = caller?.pid, let program = sync.onDemand.refusedIndexer(root.key, pid: pid) {
                    logger.debug("\(program) (pid \(pid)) is refused the content of placeholder \(path) (the store's indexers: skip)")
                    throw .permissionDenied
                }
                return .placeholder(root: root.key, path: path)
            }
        }
        var keep = false
        var version: FileVersion?
        if let st = try? Sys.stat(fd: fd) {
            let v = FileVersion(st)
            version = v
            if n.fileType == S_IFREG, let root = contentRoot ?? n.root, root.isStore {
                sync.onDemand.openedStoreFile(root: root.key, ino: UInt64(st.st_ino))
            }
            keep = n.cachedVersion.withLock { old in
                defer { old = v }
                return old == v
            }
        }
        if flags & O_TRUNC != 0 {
            keep = false
            if let caller, caller.uid != 0, let st = try? Sys.stat(fd: fd), st.st_mode & S_IFMT == S_IFREG {
                let mode = st.st_mode & 0o7777
                let kill = (mode & S_ISUID) | (mode & (S_ISGID | S_IXGRP) == (S_ISGID | S_IXGRP) ? S_ISGID : 0)
                if kill != 0 { _ = fchmod(fd, mode & ~kill) }
            }
        }
        let file = OpenFile(fd: fd, inode: n, flags: flags, version: version, directIO: direct, keepCache: keep,
                            contentRoot: contentRoot, openFiles: openFiles)
        // A store's file that a download replaced since the kernel looked its name up: the
        // kernel's node is the old file, which no name holds now, and what is written to it
        // would be lost. ESTALE makes the kernel look the name up again (open(2) retries once,
        // revalidating) and open the new file. Checked once the file counts as open for
        // writing, which a download checks before it replaces a file.
        if file.writable, (contentRoot ?? n.root)?.isStore == true,
           let now = try? Sys.stat(fd: fd), now.st_nlink == 0 {
            Sys.close(fd)
            throw .staleNFSFileHandle
        }
        if flags & O_TRUNC != 0 { file.dirty.store(true, ordering: .relaxed) }
        return .opened(file)
    }

    /// Downloads the content of the placeholder `path` of store `root` on another thread and
    /// calls `done` there: nil when it is here (open it again), else the errno for the open
    /// (ENOENT: deleted on the remote meanwhile; EIO: offline or failed, said in the log and
    /// in `docdrive status`).
    /// The placeholder a truncate by path (no open file) of node `id` to `size` needs filled
    /// first: cut to any size but 0, it keeps its first bytes, which must be here. Nil when it
    /// needs nothing (then `kernelSetattr` does it all).
    /// Cut to 0 it needs nothing, unless it is being downloaded: then the truncate waits for that.
    public func placeholderToFill(_ id: UInt64, size: Int64?, file: OpenFile?) -> (root: String, path: StorePath)? {
        guard let size, file == nil, let n = try? backing(id), n.fileType == S_IFREG,
              let content = try? acquireContent(n) else { return nil }
        defer { n.release() }
        guard let root = content.root ?? n.root, root.isStore, Placeholder.version(fd: content.fd) != nil,
              sync.uploads(root.key), let path = storePath(fd: content.fd, root: root), !path.isEmpty else { return nil }
        if size == 0, !sync.onDemand.isDownloading(root: root.key, path: path) { return nil }
        return (root.key, path)
    }

    public func fill(root: String, path: StorePath, done: @escaping @Sendable (Errno?) -> Void) {
        sync.onDemand.fill(root: root, path: path, opened: true) { e in
            done(e.map { Errno(answering: $0) })
        }
    }

    public func write(_ file: OpenFile, _ buf: UnsafeRawPointer, count: Int, offset: Int64) throws(Errno) -> Int {
        file.dirty.store(true, ordering: .relaxed)
        return try Sys.check { pwrite(file.fd, buf, count, off_t(offset)) }
    }

    public func read(_ file: OpenFile, into buf: UnsafeMutableRawPointer, count: Int, offset: Int64) throws(Errno) -> Int {
        try Sys.check { pread(file.fd, buf, count, off_t(offset)) }
    }

    /// A close of one descriptor: `lockOwner` (the closing process, sent by the kernel) loses
    /// its POSIX locks on the file, as on a native close.
    /// A close(2) of a descriptor of the file (release, the last close, comes later and
    /// asynchronously): a written file is a save as soon as close returns, so `status` and
    /// `user.docdrive.status` say "pending" right after it.
    public func flush(_ file: OpenFile, lockOwner: UInt64? = nil) throws(Errno) {
        if let lockOwner { dropLocks(file, owner: lockOwner) }
        if (file.writable && file.writesBypass.load(ordering: .relaxed)) || file.dirty.load(ordering: .relaxed) {
            let st = try? Sys.stat(fd: file.fd)
            noticeBypassedWrites(file, st)
            saved(file, st)
        }
    }

    public func release(_ file: OpenFile) {
        releaseLocks(file)
        if file.noFlush { releasedWithoutFlush(file) }
        if file.writesBypass.load(ordering: .relaxed), file.mappableShared { file.inode.mappableOpens.subtract(1, ordering: .relaxed) }
        // A passthrough file left nothing to note when it was only read, or only written (the
        // last close's flush looked at its version, and without read access it cannot be
        // mapped, so nothing can have written it since); the FUSE page cache was never used.
        // A file without flushes has had no such look: its release is its close.
        if file.writesBypass.load(ordering: .relaxed), !file.writable || !file.readable,
           !file.dirty.load(ordering: .relaxed), !file.noFlush {
            Sys.close(file.fd)
            return
        }
        // Remember the version the page cache now holds, so the next open can keep it.
        let st = try? Sys.stat(fd: file.fd)
        if let st { file.inode.cachedVersion.withLock { $0 = FileVersion(st) } }
        noticeBypassedWrites(file, st)
        saved(file, st)
        Sys.close(file.fd)
    }

    public func fsync(_ file: OpenFile, dataOnly: Bool) throws(Errno) {
        _ = try Sys.check { dataOnly ? fdatasync(file.fd) : Glibc.fsync(file.fd) }
        let st = try? Sys.stat(fd: file.fd)
        if let st { file.inode.fsyncedVersion.withLock { $0 = FileVersion(st) } }
        noticeBypassedWrites(file, st)
        saved(file, st)
    }

    /// A written file's content is saved (close, flush, fsync): published once per change.
    private func saved(_ file: OpenFile, _ st: stat?) {
        guard file.dirty.exchange(false, ordering: .relaxed) else { return }
        publish(.saved(file, links: st.map { UInt64($0.st_nlink) }, at: savedLocation(file)))
    }

    /// Runs `body` with an O_PATH descriptor of the file `file` reads and writes, one that is
    /// not `file`'s own open file description (the kernel may keep it after `file` is closed):
    /// the node's own path descriptor, or a new one for a reference's target. Nil if there is none.
    public func withContentPath<T>(_ file: OpenFile, _ body: (Int32) -> T) -> T? {
        if file.inode.reference == nil, let fd = try? file.inode.acquire() {
            defer { file.inode.release() }
            return body(fd)
        }
        let fd = dd_reopen(file.fd, Sys.O_PATH | Sys.O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Sys.close(fd) }
        return body(fd)
    }

    /// The kernel will write `file`'s backing file without calling `write` (FUSE passthrough).
    public func writesBypass(_ file: OpenFile) {
        file.writesBypass.store(true, ordering: .relaxed)
        if file.mappableShared { file.inode.mappableOpens.add(1, ordering: .relaxed) }
    }

    /// For a file whose writes bypass the drive: a changed version (size, mtime or ctime, which
    /// every write moves) since the last look means it was written, so its close is a save.
    /// Filesystems with fine-grained change times (ext4, xfs, btrfs, tmpfs on Linux 6.13+)
    /// give a write right after the open a new ctime, because the open looked at it.
    private func noticeBypassedWrites(_ file: OpenFile, _ st: stat?) {
        guard file.writable, file.writesBypass.load(ordering: .relaxed), let st else { return }
        let now = FileVersion(st)
        let changed = file.seenVersion.withLock { seen in
            defer { seen = now }
            return seen != now
        }
        if changed { file.dirty.store(true, ordering: .relaxed) }
    }

    /// `caller`: who asks (allocating, punching or zeroing drops setuid/setgid as a write does).
    public func fallocate(_ file: OpenFile, mode: Int32, offset: Int64, length: Int64, caller: Caller? = nil) throws(Errno) {
        file.dirty.store(true, ordering: .relaxed)
        dropPrivilegeBitsForModification(fd: file.fd, caller: caller)
        _ = try Sys.check { dd_fallocate(file.fd, mode, off_t(offset), off_t(length)) }
    }

    public func lseek(_ file: OpenFile, offset: Int64, whence: Int32) throws(Errno) -> Int64 {
        Int64(try Sys.check { Glibc.lseek(file.fd, off_t(offset), whence) })
    }

    public func copyFileRange(from: OpenFile, offsetIn: Int64, to: OpenFile, offsetOut: Int64, length: Int, flags: UInt32) throws(Errno) -> Int {
        var oi = off_t(offsetIn), oo = off_t(offsetOut)
        to.dirty.store(true, ordering: .relaxed)
        return try Sys.check { dd_copy_file_range(from.fd, &oi, to.fd, &oo, length, flags) }
    }
}
