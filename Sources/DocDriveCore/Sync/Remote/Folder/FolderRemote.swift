// FolderRemote: a store's remote that is a folder elsewhere (a NAS mount, a USB disk): atomic,
// verified uploads, and the marker that tells a reachable remote from an empty mount point.
import CDocDriveSys
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
    /// The remote's version token of what was placed ("" when not known).
    public var version: String = ""
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
///
/// The folder is shared (a NAS): anyone may plant a symbolic link in it. Every path is opened
/// from the root one name at a time without following a link (see Beneath): an upload, a
/// removal or a listing never reaches outside the root, and a link where a folder should be is
/// reported in one sentence instead.
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

    /// Whether a name is one the remote keeps for itself (its marker and names that begin with
    /// it, such as the pictures' folder, and upload temporaries): a
    /// user's file never takes it (the mount refuses it) and the uploader never writes it.
    public static func isOwnName<C: Collection>(_ name: C) -> Bool where C.Element == UInt8 {
        name.starts(with: markerName.utf8) || name.starts(with: temporaryPrefix.utf8)
    }

    /// Removes the temporary files an interrupted upload of this drive left (call while no
    /// upload of this drive runs); returns how many.
    @discardableResult
    public func removeStaleUploads() -> Int {
        guard let rootfd = try? openRoot() else { return 0 }
        defer { close(rootfd) }
        let prefix = Array((Self.temporaryPrefix + owner + "-").utf8)
        var n = 0
        func clear(_ dfd: Int32) {
            for e in Beneath.names(dfd) ?? [] {
                if e.name.starts(with: prefix) {
                    if Beneath.withCName(e.name[...], { unlinkat(dfd, $0, 0) }) == 0 { n += 1 }
                } else if e.type == DT_DIR, case .success(let sub) = Beneath.openFolder(dfd, [e.name[...]]) {
                    clear(sub)
                    close(sub)
                }
            }
        }
        clear(rootfd)
        return n
    }

    /// Creates the marker (at `store add`, when the folder is known to be the right one).
    public func writeMarker(store: String) throws(RemoteError) {
        do {
            try DriveHome.writeAtomically("DocDrive store \(store)\n", to: root + "/" + Self.markerName, mode: 0o644)
        } catch {
            throw RemoteError(.io, error.message, underlying: error.underlying)
        }
    }

    /// Throws a sentence unless the remote folder is there and is the store's.
    public func checkReachable() throws(RemoteError) {
        close(try openRoot())
    }

    /// Opens the root (never through a symlink: `store add` keeps the resolved folder) and checks
    /// that it is the store's (its marker is a file in it).
    func openRoot() throws(RemoteError) -> Int32 {
        let fd = open(root, O_RDONLY | dd_O_DIRECTORY | dd_O_NOFOLLOW | dd_O_CLOEXEC)
        guard fd >= 0 else {
            let e = errno
            if e == ELOOP || e == ENOTDIR {
                throw RemoteError(.unreachable, "The remote folder \(root) is not a folder (a symbolic link or a file); give the folder itself in config.yaml.")
            }
            throw RemoteError(.unreachable, "The remote folder \(root) is not reachable: \(Errno(rawValue: e).readableDescription).")
        }
        guard let st = Beneath.stat(fd, Array(Self.markerName.utf8)[...]), st.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw RemoteError(.unreachable, "The remote folder \(root) is not the store's (no \(Self.markerName) in it: is the disk or share mounted?).")
        }
        return fd
    }

    /// Checks a store path before it is used on the remote: valid names only, none of the
    /// remote's own.
    static func checkRelative(_ path: StorePath) throws(RemoteError) {
        if let p = path.problem {
            throw RemoteError(.invalidName, "\"\(path)\" is not a valid path inside a store: \(p).")
        }
        if path.names.contains(where: { isOwnName($0) }) {
            throw RemoteError(.invalidName, "\"\(path)\" has a name the remote keeps for itself (\(markerName)... or \(temporaryPrefix)...); it is never uploaded.")
        }
    }

    /// Opens the remote folder `path` beneath `rootfd` (creating it and its parents when
    /// `create`). Nil when it is not there (without `create`); a symbolic link or a file where a
    /// folder should be is an error sentence when `create`, else nil (nothing of the store is there).
    func openFolder(_ rootfd: Int32, _ path: StorePath, create: Bool, for target: StorePath) throws(RemoteError) -> Int32? {
        let names = path.names
        switch Beneath.openFolder(rootfd, names, create: create) {
        case .success(let fd): return fd
        case .failure(let stop):
            let at = StorePath(bytes: Array(names[...stop.index].joined(separator: [UInt8(ascii: "/")])))
            switch stop {
            case .missing where !create: return nil
            case .symlink where !create, .notFolder where !create: return nil
            case .symlink:
                throw symlinkError(at: at, target: target)
            case .notFolder:
                throw RemoteError(.io, "\(at) on the remote (\(root)) is a file where a folder should be, so \(target) is not uploaded (remove or rename that file there).")
            case .missing(_):
                throw remoteError("cannot create", at, ENOENT)
            case .failed(let e, _):
                throw remoteError(create ? "cannot create" : "cannot open", at, e)
            }
        }
    }

    /// Copies the open local file to `path` on the remote. `source` is read through its own
    /// offsets (pread), so the caller's descriptor position does not matter. Throws
    /// `.sourceChanged` if the local file changed while it was copied: what reaches the
    /// remote is always a whole version that existed locally. `progress` hears (bytes copied,
    /// size) after every chunk; `limit` paces the copy.
    /// `syncFolder`: make the rename durable before returning (fsync of the remote folder);
    /// false when the caller does it once for several uploads (`syncFolders`).
    /// `expecting`: place it only if the remote holds that (checked under the store's lock),
    /// else `.changed`; nil replaces whatever is there. `meta` travels in an xattr.
    public func upload(from source: Int32, to path: StorePath, limit: BandwidthLimit? = nil, syncFolder: Bool = true,
                       expecting: RemoteExpectation? = nil, meta: RemoteMeta? = nil,
                       progress: ((Int64, Int64) -> Void)? = nil, afterCopy: (() -> Void)? = nil) throws(RemoteError) -> UploadReceipt {
        try Self.checkRelative(path)
        let rootfd = try openRoot()
        defer { close(rootfd) }
        let dfd = try openFolder(rootfd, path.folder, create: true, for: path)!
        defer { close(dfd) }
        var before = stat()
        guard fstat(source, &before) == 0 else { throw RemoteError.io("cannot read the local file for \(path)", Errno(rawValue: errno)) }
        let tmp = temporaryName()
        let out = Beneath.withCName(tmp) { openat(dfd, $0, O_WRONLY | O_CREAT | O_EXCL | dd_O_NOFOLLOW | dd_O_CLOEXEC, 0o600) }
        guard out >= 0 else { throw remoteError("cannot write to", path.folder, errno) }
        var keep = false
        defer {
            close(out)
            if !keep { _ = Beneath.withCName(tmp) { unlinkat(dfd, $0, 0) } }
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
        let changedError = RemoteError(.sourceChanged, "\(path) changed while it was uploaded; it will be uploaded again.")
        var nextLook = Self.changeCheckInterval
        progress?(0, Int64(before.st_size))
        while true {
            let n = buf.withUnsafeMutableBytes { pread(source, $0.baseAddress, $0.count, offset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw RemoteError.io("cannot read the local copy of \(path)", Errno(rawValue: errno))
            }
            if n == 0 { break }
            hasher.update(data: buf[0..<n])
            var written = 0
            while written < n {
                let w = buf.withUnsafeBytes { pwrite(out, $0.baseAddress! + written, n - written, offset + off_t(written)) }
                if w < 0 {
                    if errno == EINTR { continue }
                    throw remoteError("cannot write", path, errno)
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
        guard fsync(out) == 0 else { throw remoteError("cannot flush", path, errno) }
        afterCopy?()
        var after = stat()
        guard fstat(source, &after) == 0 else { throw RemoteError.io("cannot read the local file for \(path)", Errno(rawValue: errno)) }
        if changed(after) || Int64(offset) != Int64(after.st_size) { throw changedError }
        let digest = Self.hex(hasher.finalize())
        // Read back what the remote holds before it takes the real name.
        let readBack = Beneath.withCName(tmp) { openat(dfd, $0, O_RDONLY | dd_O_NOFOLLOW | dd_O_CLOEXEC) }
        guard readBack >= 0 else { throw remoteError("cannot read back", path, errno) }
        defer { close(readBack) }
        let check = try Self.sha256(of: readBack, named: path.description)
        guard check.size == Int64(offset), check.sha256 == digest else {
            throw RemoteError(.io, "The copy of \(path) on the remote does not match the local file (size or SHA-256); it will be uploaded again.")
        }
        if let meta { Self.writeMeta(fd: out, meta) }
        if let expecting {
            try placeConditionally(tmp, dfd, as: path, expecting: expecting, rootfd: rootfd)
        } else {
            try place(tmp, dfd, as: path)
        }
        keep = true
        if syncFolder { _ = fsync(dfd) }
        var placed = stat()
        let version = fstat(out, &placed) == 0 ? Self.version(placed) : ""
        return UploadReceipt(size: Int64(offset), sha256: digest, version: version)
    }

    /// Renames the temporary `tmp` in `dfd` to the last name of `path`, replacing an empty
    /// folder that stood there (the local path became a file or a link). A folder with files in
    /// it is not removed for that: they may be another device's, which this drive never saw.
    func place(_ tmp: [UInt8], _ dfd: Int32, as path: StorePath) throws(RemoteError) {
        let name = path.lastName
        func rename() -> Int32 {
            Beneath.withCName(tmp[...]) { t in Beneath.withCName(name) { renameat(dfd, t, dfd, $0) } }
        }
        if rename() == 0 { return }
        var e = errno
        if e == EISDIR || e == ENOTEMPTY || e == EEXIST {
            if Beneath.withCName(name, { unlinkat(dfd, $0, dd_AT_REMOVEDIR) }) == 0, rename() == 0 { return }
            e = errno
            if e == ENOTEMPTY || e == EEXIST {
                throw RemoteError(.io, "\(path) on the remote (\(root)) is a folder with files in it, so the local \(path) is not uploaded over it (remove or rename that folder there).")
            }
        }
        throw remoteError("cannot rename into", path, e)
    }

    /// The sentence for a symbolic link met on the remote at `at` while `target` was carried there.
    func symlinkError(at: StorePath, target: StorePath) -> RemoteError {
        RemoteError(.io, "\(at) on the remote (\(root)) is a symbolic link where a folder should be; DocDrive never follows a link on a remote, so \(target) is not uploaded (remove or rename the link there).")
    }

    func temporaryName() -> [UInt8] {
        Array((Self.temporaryPrefix + owner + "-" + ItemIndex.newID()).utf8)
    }

    /// Bytes copied between two looks at whether the local file changed.
    public static let changeCheckInterval: off_t = 16 << 20

    /// A copy buffer for a file of `size` bytes: the whole file and a little (so one read
    /// also sees the end), at least 4 KiB, at most `max`.
    static func bufferSize(for size: Int64, max: Int) -> Int {
        Int(Swift.min(Int64(max), Swift.max(4096, size + 4096)))
    }

    public static func sha256(ofFile path: String) throws(RemoteError) -> UploadReceipt {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw RemoteError.io("cannot read \(path)", Errno(rawValue: errno)) }
        defer { close(fd) }
        return try sha256(of: fd, named: path)
    }

    /// Size and SHA-256 of what the open file holds, read from its start.
    static func sha256(of fd: Int32, named: String) throws(RemoteError) -> UploadReceipt {
        var hasher = SHA256()
        var st = stat()
        let size = fstat(fd, &st) == 0 ? Int64(st.st_size) : Int64(1 << 20)
        var buf = [UInt8](repeating: 0, count: bufferSize(for: size, max: 1 << 20))
        var total: Int64 = 0
        while true {
            let n = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(total)) }
            if n < 0 { if errno == EINTR { continue }; throw RemoteError.io("cannot read \(named)", Errno(rawValue: errno)) }
            if n == 0 { break }
            hasher.update(data: buf[0..<n])
            total += Int64(n)
        }
        return UploadReceipt(size: total, sha256: hex(hasher.finalize()))
    }

    static func hex(_ d: SHA256.Digest) -> String {
        Hex.encode(d)
    }

    /// One sentence per way a remote folder fails: full, read-only, gone, or anything else.
    func remoteError(_ what: String, _ path: StorePath, _ e: Int32) -> RemoteError {
        switch e {
        case ENOSPC, EDQUOT: return RemoteError(.unreachable, "The remote folder \(root) is full (\(what) \(path)).")
        case EROFS: return RemoteError(.unreachable, "The remote folder \(root) is read-only (\(what) \(path)).")
        case ENOENT, ENOTCONN, EIO, ESTALE: return RemoteError(.unreachable, "The remote folder \(root) is not reachable (\(what) \(path): \(Errno(rawValue: e).readableDescription)).")
        case ENAMETOOLONG: return RemoteError(.io, "The remote folder \(root) does not take a name this long (\(what) \(path)).")
        case EILSEQ, EINVAL: return RemoteError(.io, "The remote folder \(root) does not take this name (\(what) \(path): \(Errno(rawValue: e).readableDescription)).")
        default: return RemoteError.io("\(what) \(path) in the remote folder \(root)", Errno(rawValue: e))
        }
    }
}
