// FolderRemote: a store's remote that is a folder elsewhere (a NAS mount, a USB disk): atomic,
// verified uploads, and the marker that tells a reachable remote from an empty mount point.
import Crypto
import Foundation
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// What an upload put on the remote.
public struct UploadReceipt: Equatable, Sendable {
    public var size: Int64
    public var sha256: String
}

/// A limit on the bytes per second that all uploads of one store send together: each chunk
/// reserves its share of time and the uploader sleeps until that share has passed.
public final class BandwidthLimit: Sendable {
    public let bytesPerSecond: Int64
    /// When the bytes reserved so far have all been sent at the limit (seconds since 1970).
    private let freeAt = Mutex<Double>(0)

    public init(bytesPerSecond: Int64) {
        self.bytesPerSecond = max(1, bytesPerSecond)
    }

    /// A chunk size that keeps progress smooth under the limit (about 4 chunks a second).
    var chunkSize: Int { Int(min(1 << 20, max(16 << 10, bytesPerSecond / 4))) }

    /// Waits until `bytes` more fit under the limit.
    public func spend(_ bytes: Int) {
        let now = Date().timeIntervalSince1970
        let until = freeAt.withLock { t -> Double in
            // An idle limit gives no credit for the past: a burst after a pause still obeys it.
            t = max(t, now) + Double(bytes) / Double(bytesPerSecond)
            return t
        }
        let wait = until - now
        if wait > 0 { usleep(UInt32(min(wait, 60) * 1_000_000)) }
    }
}

/// A folder remote. Uploads land under a temporary name, are fsynced, verified (size and
/// SHA-256 read back) and renamed into place, so the remote never holds a torn file.
public struct FolderRemote: Sendable {
    /// Written into the remote's root by `store add`: a NAS that is not mounted shows an empty
    /// folder, and uploading into it would fill the local disk instead.
    public static let markerName = ".docdrive-store"
    static let temporaryPrefix = ".docdrive-upload-"

    public let root: String
    /// Tags this drive's temporary files, so that it clears only its own after a crash (another
    /// device sharing the folder may be uploading at the same moment).
    public let owner: String

    public init(root: String, owner: String = "") {
        self.root = root
        self.owner = owner
    }

    /// Removes the temporary files an interrupted upload of this drive left (call while no
    /// upload of this drive runs); returns how many.
    @discardableResult
    public func removeStaleUploads() -> Int {
        let prefix = Self.temporaryPrefix + owner + "-"
        var n = 0
        guard let e = FileManager.default.enumerator(atPath: root) else { return 0 }
        for case let rel as String in e where (rel as NSString).lastPathComponent.hasPrefix(prefix) {
            if unlink(root + "/" + rel) == 0 { n += 1 }
        }
        return n
    }

    /// Creates the marker (at `store add`, when the folder is known to be the right one).
    public func writeMarker(store: String) throws(DriveError) {
        try DriveHome.writeAtomically("DocDrive store \(store)\n", to: root + "/" + Self.markerName, mode: 0o644)
    }

    /// Throws a sentence unless the remote folder is there and is the store's.
    public func checkReachable() throws(DriveError) {
        var st = stat()
        guard lstat(root, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw DriveError(.unreachable, "The remote folder \(root) is not reachable: \(Errno(rawValue: errno).readableDescription).")
        }
        guard access(root + "/" + Self.markerName, F_OK) == 0 else {
            throw DriveError(.unreachable, "The remote folder \(root) is not the store's (no \(Self.markerName) in it: is the disk or share mounted?).")
        }
    }

    /// Checks a store-relative path: plain names only, no "..", no empty parts, no NUL.
    static func checkRelative(_ path: String) throws(DriveError) {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard !parts.isEmpty, parts.allSatisfy({ Names.problem(withFileName: String($0)) == nil }) else {
            throw DriveError(.invalidName, "\"\(path)\" is not a valid path inside a store.")
        }
    }

    /// Copies the open local file to `path` on the remote. `source` is read through its own
    /// offsets (pread), so the caller's descriptor position does not matter. Throws
    /// `.changedDuringUpload` if the local file changed while it was copied: what reaches the
    /// remote is always a whole version that existed locally. `progress` hears (bytes copied,
    /// size) after every chunk; `limit` paces the copy.
    /// `syncFolder`: make the rename durable before returning (fsync of the remote folder);
    /// false when the caller does it once for several uploads (`syncFolders`).
    public func upload(from source: Int32, to path: String, limit: BandwidthLimit? = nil, syncFolder: Bool = true,
                       progress: ((Int64, Int64) -> Void)? = nil, afterCopy: (() -> Void)? = nil) throws(DriveError) -> UploadReceipt {
        try Self.checkRelative(path)
        try checkReachable()
        let target = root + "/" + path
        let dir = String(target[..<target.lastIndex(of: "/")!])
        var before = stat()
        guard fstat(source, &before) == 0 else { throw DriveError.io("cannot read the local file for \(path)", Errno(rawValue: errno)) }
        let tmp = dir + "/" + Self.temporaryPrefix + owner + "-" + ItemIndex.newID()
        var out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if out < 0 && errno == ENOENT {
            // The folder is new on the remote (most uploads go into folders already there).
            try makeParents(dir)
            out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        }
        guard out >= 0 else { throw remoteError("cannot write to", dir, errno) }
        var keep = false
        defer {
            close(out)
            if !keep { unlink(tmp) }
        }
        var hasher = SHA256()
        // Sized to the file (a zeroed 1 MiB buffer per small file cost more than its copy).
        var buf = [UInt8](repeating: 0, count: Self.bufferSize(for: Int64(before.st_size), max: limit?.chunkSize ?? 1 << 20))
        var offset: off_t = 0
        // A version that changed (saved again, or deleted: that changes the ctime) will not be
        // the one on the remote: a big copy stops at the next look instead of going on for nothing.
        func changed(_ now: stat) -> Bool {
            now.st_size != before.st_size || now.st_mtim.tv_sec != before.st_mtim.tv_sec || now.st_mtim.tv_nsec != before.st_mtim.tv_nsec
                || now.st_ctim.tv_sec != before.st_ctim.tv_sec || now.st_ctim.tv_nsec != before.st_ctim.tv_nsec
        }
        let changedError = DriveError(.changedDuringUpload, "\(path) changed while it was uploaded; it will be uploaded again.")
        var nextLook = Self.changeCheckInterval
        progress?(0, Int64(before.st_size))
        while true {
            let n = buf.withUnsafeMutableBytes { pread(source, $0.baseAddress, $0.count, offset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw DriveError.io("cannot read the local copy of \(path)", Errno(rawValue: errno))
            }
            if n == 0 { break }
            hasher.update(data: buf[0..<n])
            var written = 0
            while written < n {
                let w = buf.withUnsafeBytes { pwrite(out, $0.baseAddress! + written, n - written, offset + off_t(written)) }
                if w < 0 {
                    if errno == EINTR { continue }
                    throw remoteError("cannot write", target, errno)
                }
                written += w
            }
            offset += off_t(n)
            limit?.spend(n)
            progress?(Int64(offset), Int64(before.st_size))
            if offset >= nextLook {
                nextLook = offset + Self.changeCheckInterval
                var now = stat()
                if fstat(source, &now) == 0 && changed(now) { throw changedError }
            }
        }
        _ = fchmod(out, before.st_mode & 0o777)
        var times = [before.st_atim, before.st_mtim]
        _ = futimens(out, &times)
        guard fsync(out) == 0 else { throw remoteError("cannot flush", target, errno) }
        afterCopy?()
        var after = stat()
        guard fstat(source, &after) == 0 else { throw DriveError.io("cannot read the local file for \(path)", Errno(rawValue: errno)) }
        if changed(after) || Int64(offset) != Int64(after.st_size) { throw changedError }
        let digest = Self.hex(hasher.finalize())
        // Read back what the remote holds before it takes the real name.
        let check = try Self.sha256(ofFile: tmp)
        guard check.size == Int64(offset), check.sha256 == digest else {
            throw DriveError(.io, "The copy of \(path) on the remote does not match the local file (size or SHA-256); it will be uploaded again.")
        }
        guard Glibc.rename(tmp, target) == 0 else { throw remoteError("cannot rename into", target, errno) }
        keep = true
        if syncFolder { syncFolders([dir]) }
        return UploadReceipt(size: Int64(offset), sha256: digest)
    }

    /// The remote folder an upload of `path` renames into.
    public func folder(of path: String) -> String {
        let target = root + "/" + path
        return String(target[..<target.lastIndex(of: "/")!])
    }

    /// Makes the renames into these remote folders durable (one fsync per folder, however many
    /// uploads went into it). Best effort: a folder that cannot be opened is skipped.
    public func syncFolders<S: Sequence>(_ folders: S) where S.Element == String {
        for dir in folders {
            let dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if dfd >= 0 {
                _ = fsync(dfd)
                close(dfd)
            }
        }
    }

    /// Removes a file or a whole folder from the remote; what is already gone is fine.
    public func remove(_ path: String) throws(DriveError) {
        try Self.checkRelative(path)
        try checkReachable()
        let target = root + "/" + path
        var st = stat()
        guard lstat(target, &st) == 0 else { return }
        if st.st_mode & S_IFMT == S_IFDIR {
            let err = Self.removeTree(AT_FDCWD, target)
            if err != 0 { throw remoteError("cannot remove", target, err) }
        } else if unlink(target) != 0 && errno != ENOENT {
            throw remoteError("cannot remove", target, errno)
        }
    }

    /// Removes `name` in the folder `dfd` with everything under it, never following a symlink;
    /// 0, or the errno of what could not be removed. Entries that are already gone are fine:
    /// several workers remove the files of a deleted folder and the folder itself side by side.
    private static func removeTree(_ dfd: Int32, _ name: String) -> Int32 {
        if unlinkat(dfd, name, 0) == 0 || errno == ENOENT { return 0 }
        guard errno == EISDIR else { return errno }
        let sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard sub >= 0 else { return errno == ENOENT ? 0 : errno }
        guard let dir = fdopendir(sub) else {
            let e = errno
            close(sub)
            return e
        }
        var names = [String]()
        while let ent = readdir(dir) {
            let n = withUnsafePointer(to: &ent.pointee.d_name) { t in
                t.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if n != "." && n != ".." { names.append(n) }
        }
        var failure: Int32 = 0
        for n in names {
            let e = removeTree(dirfd(dir), n)
            if e != 0 { failure = e }
        }
        closedir(dir)
        if failure != 0 { return failure }
        return unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : errno
    }

    /// Size and modification time of a remote file, or nil if there is none.
    public func attributes(_ path: String) -> (size: Int64, mtime: timespec, isDirectory: Bool)? {
        var st = stat()
        guard lstat(root + "/" + path, &st) == 0 else { return nil }
        return (Int64(st.st_size), st.st_mtim, st.st_mode & S_IFMT == S_IFDIR)
    }

    /// Names in a remote folder (without the drive's own files), or [] if there is none.
    public func list(_ path: String) -> [String] {
        let dir = path.isEmpty ? root : root + "/" + path
        return ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [])
            .filter { $0 != Self.markerName && !$0.hasPrefix(Self.temporaryPrefix) }
    }

    /// Renames on the remote (creating the new parents); a missing source is fine (not uploaded yet).
    public func rename(_ from: String, to: String) throws(DriveError) {
        try Self.checkRelative(from)
        try Self.checkRelative(to)
        try checkReachable()
        let target = root + "/" + to
        try makeParents(String(target[..<target.lastIndex(of: "/")!]))
        if Glibc.rename(root + "/" + from, target) != 0 && errno != ENOENT { throw remoteError("cannot rename on", target, errno) }
    }

    /// Bytes copied between two looks at whether the local file changed.
    public static let changeCheckInterval: off_t = 16 << 20

    /// A copy buffer for a file of `size` bytes: the whole file and a little (so one read
    /// also sees the end), at least 4 KiB, at most `max`.
    static func bufferSize(for size: Int64, max: Int) -> Int {
        Int(Swift.min(Int64(max), Swift.max(4096, size + 4096)))
    }

    public static func sha256(ofFile path: String) throws(DriveError) -> UploadReceipt {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw DriveError.io("cannot read \(path)", Errno(rawValue: errno)) }
        defer { close(fd) }
        var hasher = SHA256()
        var st = stat()
        let size = fstat(fd, &st) == 0 ? Int64(st.st_size) : Int64(1 << 20)
        var buf = [UInt8](repeating: 0, count: bufferSize(for: size, max: 1 << 20))
        var total: Int64 = 0
        while true {
            let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue }; throw DriveError.io("cannot read \(path)", Errno(rawValue: errno)) }
            if n == 0 { break }
            hasher.update(data: buf[0..<n])
            total += Int64(n)
        }
        return UploadReceipt(size: total, sha256: hex(hasher.finalize()))
    }

    static func hex(_ d: SHA256.Digest) -> String {
        Hex.encode(d)
    }

    private func makeParents(_ dir: String) throws(DriveError) {
        do {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        } catch {
            throw DriveError(.io, "cannot create \(dir) on the remote: \((error as NSError).localizedDescription).", underlying: error)
        }
    }

    /// One sentence per way a remote folder fails: full, read-only, gone, or anything else.
    private func remoteError(_ what: String, _ path: String, _ e: Int32) -> DriveError {
        switch e {
        case ENOSPC, EDQUOT: return DriveError(.unreachable, "The remote folder \(root) is full (\(what) \(path)).")
        case EROFS: return DriveError(.unreachable, "The remote folder \(root) is read-only (\(what) \(path)).")
        case ENOENT, ENOTCONN, EIO, ESTALE: return DriveError(.unreachable, "The remote folder \(root) is not reachable (\(what) \(path): \(Errno(rawValue: e).readableDescription)).")
        default: return DriveError.io("\(what) \(path)", Errno(rawValue: e))
        }
    }
}
