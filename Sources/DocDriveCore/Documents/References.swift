// References: reference entries (DESIGN.md 3): small signed files in an app's container that
// stand, in the mount, for a document kept in a store, found again by its stable item id.
import CDocDriveSys
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The reserved name ending of reference files. The mount never lists a name with it, never
/// lets one be created (EINVAL), and shows `report.odt.docdrive-ref` as `report.odt`.
/// Also reserved, everywhere in the mount: the names a folder remote keeps for itself (its
/// marker `.docdrive-store`, upload temporaries `.docdrive-upload-*`): a user's file with one
/// would overwrite the marker on the remote, or be taken for (and cleared as) a temporary.
public enum ReservedNames {
    public static let referenceSuffix = ".docdrive-ref"
    private static let suffixBytes = Array(referenceSuffix.utf8)
    private static let markerBytes = Array(FolderRemote.markerName.utf8)
    private static let temporaryBytes = Array(FolderRemote.temporaryPrefix.utf8)

    @inline(__always)
    public static func isReserved(_ name: UnsafePointer<CChar>) -> Bool {
        isReserved(name, length: strlen(name))
    }

    @inline(__always)
    static func isReserved(_ name: UnsafePointer<CChar>, length: Int) -> Bool {
        isReference(name, length: length) || isRemoteOwn(name, length: length)
    }

    /// A reference file's name (what a container shows under its document's name).
    @inline(__always)
    static func isReference(_ name: UnsafePointer<CChar>, length: Int) -> Bool {
        let n = suffixBytes.count
        guard length >= n else { return false }
        return suffixBytes.withUnsafeBufferPointer { memcmp(name + (length - n), $0.baseAddress!, n) == 0 }
    }

    /// One of a folder remote's own names. Costs one byte compare for names not starting with ".".
    @inline(__always)
    static func isRemoteOwn(_ name: UnsafePointer<CChar>, length: Int) -> Bool {
        guard length >= markerBytes.count, name[0] == CChar(UInt8(ascii: ".")) else { return false }
        if length == markerBytes.count { return markerBytes.withUnsafeBufferPointer { memcmp(name, $0.baseAddress!, length) == 0 } }
        return length >= temporaryBytes.count && temporaryBytes.withUnsafeBufferPointer { memcmp(name, $0.baseAddress!, $0.count) == 0 }
    }

    public static func isReserved(_ name: String) -> Bool {
        name.hasSuffix(referenceSuffix) || FolderRemote.isOwnName(name.utf8)
    }

    /// A reference file's name (a path's last name is enough).
    public static func isReference(_ name: String) -> Bool { name.hasSuffix(referenceSuffix) }

    /// The reference file's name for a shown name.
    public static func referenceName(_ shown: String) -> String { shown + referenceSuffix }
}

/// What a reference file holds (sealed with the drive key, purpose `reference`).
public struct ReferencePayload: Codable, Equatable, Sendable {
    /// The app whose container holds the reference; a copy in another container is refused.
    public var app: String
    /// The store's name (not its display name, which may change).
    public var store: String
    /// The target's stable item id: identity. Everything else is a hint.
    public var item: String
    /// The target's path inside the store when the reference was written.
    public var hint: String
    /// The target's file handle (base64), which finds it again after renames; "" if none.
    public var handle: String
    public var created: Double

    public init(app: String, store: String, item: String, hint: String, handle: String, created: Double) {
        self.app = app
        self.store = store
        self.item = item
        self.hint = hint
        self.handle = handle
        self.created = created
    }

    public var rootKey: String { RootKey.store(store).description }
}

/// Why a reference cannot be followed (user.docdrive.status, `docdrive status`).
public enum ReferenceProblem: String, Sendable {
    /// The target is gone (deleted, or its store was removed).
    case missing
    /// The file was altered, forged, or copied from another app's container: never followed.
    case invalid
    /// The app's grant was revoked: its own view no longer opens the target.
    case revoked
}

/// A reference node's link to its target. The target's O_PATH descriptor is kept while the node
/// lives; when the target is replaced (save-by-rename) or moved, the reference is resolved
/// again and the old descriptor is kept until the node goes (an operation may still use it).
///
/// Lock: `targets` protects the descriptor list; leaf lock, never held across a system call.
public final class ReferenceLink: Sendable {
    /// nil when the file failed its check (`invalid`).
    public let payload: ReferencePayload?
    let storeRoot: BackingRoot?
    /// Every target descriptor resolved so far (the newest last), and the drive's identity
    /// generation when the newest was resolved.
    private let targets = Mutex<(fds: [Int32], generation: UInt64)>(([], 0))

    init(payload: ReferencePayload?, storeRoot: BackingRoot?) {
        self.payload = payload
        self.storeRoot = storeRoot
    }

    /// The newest target descriptor, or -1. `generation`: the drive's identity generation now;
    /// a descriptor resolved before an item changed files (an editor's save) is not current.
    func current(generation: UInt64) -> Int32 {
        targets.withLock { $0.generation == generation ? ($0.fds.last ?? -1) : -1 }
    }

    /// Adopts a freshly resolved descriptor (returns the one now current). The same file as
    /// the current one is not kept twice: `fd` is closed and the current one answers.
    func adopt(_ fd: Int32, generation: UInt64) -> Int32 {
        let same = targets.withLock { t -> Int32 in
            guard let last = t.fds.last else { return -1 }
            return last
        }
        if same >= 0, let a = try? Sys.stat(fd: same), let b = try? Sys.stat(fd: fd),
           a.st_dev == b.st_dev, a.st_ino == b.st_ino, a.st_nlink > 0 {
            Sys.close(fd)
            targets.withLock { t in if t.fds.last == same { t.generation = generation } }
            return same
        }
        return targets.withLock { t in
            t.fds.append(fd)
            t.generation = generation
            return fd
        }
    }

    deinit {
        for fd in targets.withLock({ $0.fds }) { Sys.close(fd) }
    }

    /// Reads and checks a reference file (at most 8 KiB; the token's own limit).
    static func read(_ dirfd: Int32, _ name: String, key: DriveKey?) -> ReferencePayload? {
        guard let key, let bytes = readFile(dirfd, name) else { return nil }
        var text = String(decoding: bytes, as: UTF8.self)
        if text.hasSuffix("\n") { text.removeLast() }
        return try? SignedToken.open(text, as: ReferencePayload.self, purpose: .reference, key: key)
    }

    /// A reference file's bytes, nil if unreadable or longer than a token can be.
    static func readFile(_ dirfd: Int32, _ name: String) -> [UInt8]? {
        let fd = openat(dirfd, name, O_RDONLY | Sys.O_NOFOLLOW | Sys.O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Sys.close(fd) }
        var buf = [UInt8](repeating: 0, count: SignedToken.maxLength + 2)
        var total = 0
        while total < buf.count {
            let n = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, $0.count - total) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            total += n
        }
        return total <= SignedToken.maxLength + 1 ? Array(buf[0..<total]) : nil
    }

    /// The file's content for `payload`.
    public static func encode(_ payload: ReferencePayload, key: DriveKey) -> String {
        SignedToken.seal(payload, purpose: .reference, key: key) + "\n"
    }
}
