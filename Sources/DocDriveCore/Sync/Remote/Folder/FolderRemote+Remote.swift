// FolderRemote+Remote: a shared folder as a Remote. Versions are (size, mtime, inode); metadata
// travels in one extended attribute; conditional writes are checked and placed under a lock on
// the store's marker file, which every DocDrive device takes.
//
// The race left: a program that is not DocDrive (rsync, a file manager on the NAS) writing the
// same name between the check and the rename is overwritten, as it would be by any other
// program. DocDrive devices never overwrite each other: they all take the lock. flock is
// honoured by NFS (as a POSIX lock) and SMB mounts; a file system without locks is refused at
// the first write with a sentence.
import CDocDriveSys
import Crypto
import Foundation
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

extension FolderRemote: Remote {
    public var displayName: String { "the remote folder \(root)" }

    /// The extended attribute that holds an item's RemoteMeta (JSON) on the remote.
    static let metaAttribute = "user.docdrive.meta"

    /// A file's or link's version: size, mtime and inode. An upload is a new file renamed into
    /// place (a new inode), so two versions never share one; a rename keeps it.
    static func version(_ st: stat) -> String {
        switch st.st_mode & S_IFMT {
        case S_IFDIR: return ""
        default: return "\(st.st_size):\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec):\(st.st_ino)"
        }
    }

    static func kind(_ st: stat) -> SyncEntry.Kind? {
        switch st.st_mode & S_IFMT {
        case S_IFREG: return .file
        case S_IFDIR: return .folder
        case S_IFLNK: return .symlink
        default: return nil
        }
    }

    static func writeMeta(fd: Int32, _ meta: RemoteMeta) {
        let json = meta.jsonBytes
        _ = json.withUnsafeBytes { dd_setxattr_path(fd, metaAttribute, $0.baseAddress, $0.count, 0) }
    }

    /// The metadata of `name` in `dfd` (none for a link: Linux keeps no user xattrs on links),
    /// with mtime and mode from `st`.
    static func readMeta(_ dfd: Int32, _ name: ArraySlice<UInt8>, _ st: stat) -> RemoteMeta {
        var meta = RemoteMeta()
        if st.st_mode & S_IFMT != S_IFLNK {
            // One call per item, no descriptor: a poll reads this for every item of the store.
            let read: RemoteMeta? = withUnsafeTemporaryAllocation(byteCount: 1024, alignment: 1) { buf in
                let n = Beneath.withCName(name) { dd_getxattr_at(dfd, $0, metaAttribute, buf.baseAddress, buf.count) }
                return n > 0 ? RemoteMeta.decodingJSON(UnsafeRawBufferPointer(rebasing: buf[..<n])) : nil
            }
            if let read { meta = read }
        }
        meta.mtimeNanoseconds = Timestamp.nanoseconds(st.st_mtim)
        meta.mode = UInt32(st.st_mode & 0o7777)
        return meta
    }

    static func item(_ path: StorePath, _ dfd: Int32, _ name: ArraySlice<UInt8>, _ st: stat) -> RemoteItem? {
        guard let kind = kind(st) else { return nil }
        return RemoteItem(path: path, kind: kind, version: version(st), size: kind == .folder ? 0 : Int64(st.st_size),
                          meta: readMeta(dfd, name, st))
    }

    /// Runs `body` holding the store's lock (an exclusive flock of the marker file).
    func withStoreLock<T>(_ rootfd: Int32, _ body: () throws(RemoteError) -> T) throws(RemoteError) -> T {
        let fd = openat(rootfd, Self.markerName, O_RDONLY | dd_O_NOFOLLOW | dd_O_CLOEXEC)
        guard fd >= 0 else { throw remoteError("cannot lock", StorePath(Self.markerName), errno) }
        defer { close(fd) }
        while flock(fd, LOCK_EX) != 0 {
            if errno == EINTR { continue }
            throw RemoteError(.unreachable, "The remote folder \(root) does not take locks (\(Errno(rawValue: errno).readableDescription)); several devices cannot share it safely.")
        }
        return try body()
    }

    /// Whether what stands at `name` in `dfd` is what `expecting` says.
    func holds(_ dfd: Int32, _ name: ArraySlice<UInt8>, _ expecting: RemoteExpectation) -> Bool {
        let st = Beneath.stat(dfd, name)
        switch expecting {
        case .absent: return st == nil
        case .version(let v): return st.map { Self.version($0) == v } ?? false
        }
    }

    /// Renames the temporary `tmp` to `path` if the remote holds what `expecting` says.
    func placeConditionally(_ tmp: [UInt8], _ dfd: Int32, as path: StorePath, expecting: RemoteExpectation, rootfd: Int32) throws(RemoteError) {
        try withStoreLock(rootfd) { () throws(RemoteError) in
            guard holds(dfd, path.lastName, expecting) else {
                throw RemoteError(.changed, "\(path) changed on the remote (another device wrote it) since this device last saw it.")
            }
            let flags: UInt32 = expecting == .absent ? UInt32(dd_RENAME_NOREPLACE) : 0
            let r = Beneath.withCName(tmp[...]) { t in Beneath.withCName(path.lastName) { dd_renameat2(dfd, t, dfd, $0, flags) } }
            if r != 0 {
                if errno == EEXIST { throw RemoteError(.changed, "\(path) was created on the remote by another device meanwhile.") }
                throw remoteError("cannot rename into", path, errno)
            }
        }
    }

    // MARK: Remote

    public func list() throws(RemoteError) -> [RemoteItem] {
        var out = [RemoteItem]()
        var strings = SharedStrings()
        try walkEntries { dfd, name, rel, st throws(RemoteError) in
            guard var item = Self.item(rel, dfd, name, st) else { return false }
            item.meta.shareDeviceStrings(in: &strings)
            out.append(item)
            return item.kind == .folder
        }
        return out
    }

    /// Walks the remote from its root, a folder at a time and never through a link: `visit`
    /// sees every entry but the remote's own (its open folder, name, path and `stat`) and says
    /// whether to go into it.
    private func walkEntries(_ visit: (_ dfd: Int32, _ name: ArraySlice<UInt8>, _ path: StorePath, _ st: stat) throws(RemoteError) -> Bool) throws(RemoteError) {
        let rootfd = try openRoot()
        defer { close(rootfd) }
        func walk(_ dfd: Int32, _ path: StorePath) throws(RemoteError) {
            guard let entries = Beneath.names(dfd) else { throw remoteError("cannot list", path, errno) }
            for e in entries where !Self.isOwnName(e.name) {
                let name = e.name[...]
                guard let st = Beneath.stat(dfd, name) else { continue }
                let rel = path.appending(name)
                if try visit(dfd, name, rel, st), case .success(let sub) = Beneath.openFolder(dfd, [name]) {
                    defer { close(sub) }
                    try walk(sub, rel)
                }
            }
        }
        try walk(rootfd, .store)
    }

    /// The walk of `list` with a `stat` per entry and no metadata: a poll of a store where
    /// nothing changed since the last one that found nothing to do ends after it
    /// (`StoreSync.startPoll`). Writing an item's metadata changes its ctime; a change of a
    /// file's content, its replacement, a rename and a removal change the entry or its folder's.
    ///
    /// Nil when an entry changed less than `settledSeconds` before the walk began: file systems
    /// stamp changes with a coarse clock (ext4: a few milliseconds; some: whole seconds), so a
    /// second change within the same tick (an upload's metadata written right after its rename)
    /// can leave every time as it was. The local clock reads the times, so a remote whose
    /// server's clock runs behind is covered only by the whole poll that follows a few quiet
    /// ones (`ListingMemory.quietPollsInARow`).
    public func fingerprint() throws(RemoteError) -> [UInt8]? {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &now)
        let settledBefore = Int64(now.tv_sec) - Self.settledSeconds
        var settled = true
        var hasher = SHA256()
        try walkEntries { _, _, rel, st throws(RemoteError) in
            if Int64(st.st_ctim.tv_sec) >= settledBefore || Int64(st.st_mtim.tv_sec) >= settledBefore { settled = false }
            withUnsafeTemporaryAllocation(of: Int64.self, capacity: 8) { f in
                f[0] = Int64(rel.bytes.count)
                f[1] = Int64(st.st_mode)
                f[2] = Int64(bitPattern: UInt64(st.st_ino))
                f[3] = Int64(st.st_size)
                f[4] = Int64(st.st_mtim.tv_sec)
                f[5] = Int64(st.st_mtim.tv_nsec)
                f[6] = Int64(st.st_ctim.tv_sec)
                f[7] = Int64(st.st_ctim.tv_nsec)
                hasher.update(bufferPointer: UnsafeRawBufferPointer(f))
            }
            rel.bytes.withUnsafeBytes { hasher.update(bufferPointer: $0) }
            return st.st_mode & S_IFMT == S_IFDIR
        }
        return settled ? Array(hasher.finalize()) : nil
    }

    /// How long ago (by the local clock) every entry must have last changed for a fingerprint.
    package static let settledSeconds: Int64 = 2

    public func item(at path: StorePath) throws(RemoteError) -> RemoteItem? {
        try Self.checkRelative(path)
        let rootfd = try openRoot()
        defer { close(rootfd) }
        guard let dfd = try openFolder(rootfd, path.folder, create: false, for: path) else { return nil }
        defer { close(dfd) }
        guard let st = Beneath.stat(dfd, path.lastName) else { return nil }
        return Self.item(path, dfd, path.lastName, st)
    }

    public func download(_ path: StorePath, version: String?, to out: Int32,
                         progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> RemoteItem {
        try Self.checkRelative(path)
        let rootfd = try openRoot()
        defer { close(rootfd) }
        guard let dfd = try openFolder(rootfd, path.folder, create: false, for: path) else {
            throw RemoteError(.notFound, "\(path) is no longer on the remote.")
        }
        defer { close(dfd) }
        guard let st = Beneath.stat(dfd, path.lastName), let item = Self.item(path, dfd, path.lastName, st) else {
            throw RemoteError(.notFound, "\(path) is no longer on the remote.")
        }
        if let version, item.version != version {
            throw RemoteError(.changed, "\(path) changed on the remote while it was being downloaded.")
        }
        if item.kind == .symlink {
            let target = Beneath.readLink(dfd, path.lastName) ?? []
            guard ftruncate(out, 0) == 0, target.withUnsafeBytes({ pwrite(out, $0.baseAddress, $0.count, 0) }) == target.count else {
                throw RemoteError.io("cannot write the download of \(path)", Errno(rawValue: errno))
            }
            return item
        }
        guard item.kind == .file else { return item }
        let src = Beneath.openForReading(dfd, path.lastName)
        guard src >= 0 else { throw remoteError("cannot read", path, errno) }
        defer { close(src) }
        var buf = [UInt8](repeating: 0, count: Self.bufferSize(for: item.size, max: 1 << 20))
        var offset: off_t = 0
        progress?(0, item.size)
        while true {
            let n = buf.withUnsafeMutableBytes { pread(src, $0.baseAddress, $0.count, offset) }
            if n < 0 { if errno == EINTR { continue }; throw remoteError("cannot read", path, errno) }
            if n == 0 { break }
            var written = 0
            while written < n {
                let w = buf.withUnsafeBytes { pwrite(out, $0.baseAddress! + written, n - written, offset + off_t(written)) }
                if w < 0 {
                    if errno == EINTR { continue }
                    throw RemoteError.io("cannot write the download of \(path)", Errno(rawValue: errno))
                }
                written += w
            }
            offset += off_t(n)
            progress?(Int64(offset), item.size)
        }
        // Replaced by a rename keeps the old file readable (its inode): check that the version
        // read is the one still there (a file rewritten in place by another tool shows too).
        var after = stat()
        guard fstat(src, &after) == 0, Self.version(after) == item.version, Int64(offset) == item.size else {
            throw RemoteError(.changed, "\(path) changed on the remote while it was being downloaded.")
        }
        return item
    }

    public func upload(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                       limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> RemoteItem {
        try upload(from: source, to: path, expecting: expecting, meta: meta, limit: limit, syncFolder: true, progress: progress)
    }

    /// The file's bytes are flushed before it takes its name (a crash never leaves a torn file
    /// under it); the rename waits for `makeDurable` of its folder.
    public func uploadDurableLater(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                                   limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> (item: RemoteItem, folder: StorePath?) {
        (try upload(from: source, to: path, expecting: expecting, meta: meta, limit: limit, syncFolder: false, progress: progress), path.folder)
    }

    public func makeDurable(_ folders: Set<StorePath>) throws(RemoteError) {
        guard !folders.isEmpty else { return }
        let rootfd = try openRoot()
        defer { close(rootfd) }
        for folder in folders {
            guard let dfd = try openFolder(rootfd, folder, create: false, for: folder) else {
                throw RemoteError(.changed, "\(folder) is no longer a folder on the remote (\(root)), so what was just uploaded into it may not be there; it is looked at again.")
            }
            defer { close(dfd) }
            guard fsync(dfd) == 0 else { throw remoteError("cannot flush", folder, errno) }
        }
    }

    private func upload(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                        limit: BandwidthLimit?, syncFolder: Bool, progress: ((Int64, Int64) -> Void)?) throws(RemoteError) -> RemoteItem {
        let receipt = try upload(from: source, to: path, limit: limit, syncFolder: syncFolder, expecting: expecting, meta: meta, progress: progress)
        var st = stat()
        _ = fstat(source, &st)
        var m = meta
        m.mtimeNanoseconds = Timestamp.nanoseconds(st.st_mtim)
        m.mode = UInt32(st.st_mode & 0o7777)
        return RemoteItem(path: path, kind: .file, version: receipt.version, size: receipt.size, meta: m)
    }

    public func makeFolder(_ path: StorePath, meta: RemoteMeta) throws(RemoteError) -> RemoteItem {
        try Self.checkRelative(path)
        let rootfd = try openRoot()
        defer { close(rootfd) }
        let dfd = try openFolder(rootfd, path.folder, create: true, for: path)!
        defer { close(dfd) }
        let name = path.lastName
        if let st = Beneath.stat(dfd, name), st.st_mode & S_IFMT != S_IFDIR {
            if st.st_mode & S_IFMT == S_IFLNK { throw symlinkError(at: path, target: path) }
            throw RemoteError(.io, "\(path) is a file on the remote (\(root)) where this device has a folder; rename one of them.")
        }
        let made = Beneath.withCName(name, { mkdirat(dfd, $0, mode_t(meta.mode ?? 0o755) & 0o7777) }) == 0
        if !made && errno != EEXIST { throw remoteError("cannot create", path, errno) }
        if made {
            if case .success(let sub) = Beneath.openFolder(dfd, [name]) {
                Self.writeMeta(fd: sub, meta)
                close(sub)
            }
            _ = fsync(dfd)
        } else if meta.itemID != nil, let st = Beneath.stat(dfd, name), Self.readMeta(dfd, name, st).itemID == nil,
                  case .success(let sub) = Beneath.openFolder(dfd, [name]) {
            // Made on the way to an item moved or uploaded into it: it takes the id it is given.
            Self.writeMeta(fd: sub, meta)
            close(sub)
        }
        guard let st = Beneath.stat(dfd, name), let item = Self.item(path, dfd, name, st) else {
            throw RemoteError(.changed, "\(path) was removed from the remote meanwhile.")
        }
        return item
    }

    public func makeSymlink(_ target: [UInt8], at path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta) throws(RemoteError) -> RemoteItem {
        try Self.checkRelative(path)
        let rootfd = try openRoot()
        defer { close(rootfd) }
        let dfd = try openFolder(rootfd, path.folder, create: true, for: path)!
        defer { close(dfd) }
        let tmp = temporaryName()
        let made = Beneath.withCName(target[...]) { t in Beneath.withCName(tmp) { symlinkat(t, dfd, $0) } }
        guard made == 0 else { throw remoteError("cannot create a link at", path, errno) }
        do {
            try placeConditionally(tmp, dfd, as: path, expecting: expecting, rootfd: rootfd)
        } catch {
            _ = Beneath.withCName(tmp) { unlinkat(dfd, $0, 0) }
            throw error
        }
        _ = fsync(dfd)
        guard let st = Beneath.stat(dfd, path.lastName), let item = Self.item(path, dfd, path.lastName, st) else {
            throw RemoteError(.changed, "\(path) was removed from the remote meanwhile.")
        }
        return item
    }

    public func delete(_ path: StorePath, version: String) throws(RemoteError) {
        try Self.checkRelative(path)
        let rootfd = try openRoot()
        defer { close(rootfd) }
        guard let dfd = try openFolder(rootfd, path.folder, create: false, for: path) else { return }
        defer { close(dfd) }
        try withStoreLock(rootfd) { () throws(RemoteError) in
            guard let st = Beneath.stat(dfd, path.lastName) else { return }
            guard Self.version(st) == version, (st.st_mode & S_IFMT == S_IFDIR) == version.isEmpty else {
                throw RemoteError(.changed, "\(path) changed on the remote since this device last saw it, so it is not deleted there.")
            }
            let flags = st.st_mode & S_IFMT == S_IFDIR ? dd_AT_REMOVEDIR : 0
            if Beneath.withCName(path.lastName, { unlinkat(dfd, $0, flags) }) != 0 {
                if errno == ENOENT { return }
                if errno == ENOTEMPTY || errno == EEXIST {
                    throw RemoteError(.changed, "\(path) on the remote has files this device has not seen, so it is not deleted there.")
                }
                throw remoteError("cannot remove", path, errno)
            }
        }
        _ = fsync(dfd)
    }

    public func reassign(_ path: StorePath, version: String, meta: RemoteMeta) throws(RemoteError) -> RemoteItem {
        try Self.checkRelative(path)
        let rootfd = try openRoot()
        defer { close(rootfd) }
        guard let dfd = try openFolder(rootfd, path.folder, create: false, for: path) else {
            throw RemoteError(.changed, "\(path) was deleted on the remote meanwhile.")
        }
        defer { close(dfd) }
        return try withStoreLock(rootfd) { () throws(RemoteError) -> RemoteItem in
            guard let st = Beneath.stat(dfd, path.lastName), st.st_mode & S_IFMT == S_IFREG, Self.version(st) == version else {
                throw RemoteError(.changed, "\(path) changed on the remote since this device last saw it.")
            }
            let fd = Beneath.withCName(path.lastName) { openat(dfd, $0, dd_O_PATH | dd_O_NOFOLLOW | dd_O_CLOEXEC) }
            guard fd >= 0 else { throw remoteError("cannot open", path, errno) }
            defer { close(fd) }
            Self.writeMeta(fd: fd, meta)
            // An extended attribute changes the ctime only: the version (size, mtime, inode) stays.
            guard let now = Beneath.stat(dfd, path.lastName), let item = Self.item(path, dfd, path.lastName, now) else {
                throw RemoteError(.changed, "\(path) was deleted on the remote meanwhile.")
            }
            return item
        }
    }

    public func move(_ from: StorePath, version: String, to: StorePath) throws(RemoteError) -> RemoteItem {
        try Self.checkRelative(from)
        try Self.checkRelative(to)
        let rootfd = try openRoot()
        defer { close(rootfd) }
        guard let src = try openFolder(rootfd, from.folder, create: false, for: from) else {
            throw RemoteError(.changed, "\(from) is no longer on the remote.")
        }
        defer { close(src) }
        let dst = try openFolder(rootfd, to.folder, create: true, for: to)!
        defer { close(dst) }
        try withStoreLock(rootfd) { () throws(RemoteError) in
            guard let st = Beneath.stat(src, from.lastName), Self.version(st) == version else {
                throw RemoteError(.changed, "\(from) changed on the remote since this device last saw it, so it is not moved there.")
            }
            let r = Beneath.withCName(from.lastName) { f in Beneath.withCName(to.lastName) { dd_renameat2(src, f, dst, $0, UInt32(dd_RENAME_NOREPLACE)) } }
            if r != 0 {
                if errno == EEXIST || errno == ENOTEMPTY { throw RemoteError(.changed, "\(to) was created on the remote by another device meanwhile.") }
                throw remoteError("cannot rename on", to, errno)
            }
        }
        _ = fsync(src)
        if src != dst { _ = fsync(dst) }
        guard let st = Beneath.stat(dst, to.lastName), let item = Self.item(to, dst, to.lastName, st) else {
            throw RemoteError(.changed, "\(to) was removed from the remote meanwhile.")
        }
        return item
    }
}
