// Placeholder: a remote file whose content is not on this device yet (on-demand stores).
//
// A placeholder is the local file itself, made sparse: the real size, mode and modification
// time, no blocks, and the attribute `user.docdrive.placeholder` holding the remote version it
// stands for. `ls`, `stat`, `find` and `du --apparent-size` see the real file; `du` counts no
// blocks. Its first open fills it in place (same inode, so the kernel's node and the item id do
// not change), and only then is the attribute removed: a file with the attribute is never
// user data (a download cut short leaves a placeholder, never a partial file), so the sync
// engine never uploads it and may always replace it. An open with O_TRUNC makes it an empty
// file of the user's at once. The attribute is under the drive's own prefix, which the mount
// hides from listings and refuses to set.
//
// Between a fill and the moment its content is known to be on the disk, the attribute holds a
// third kind of value, "filled in boot B" (`filledValue`, FillCommits.swift): in boot B the
// file is whole (no placeholder); after a reboot it is a placeholder of the version it was
// filled with, since a power cut may have lost its content. That value is kept short (a NUL,
// "f", 8 hex digits for the boot, a space, the version: 43 bytes for an S3 object's MD5, 45-50
// for a folder remote's version of a small file) so that it fits in the inode: on ext4 with
// 256-byte inodes a value of up to 52 bytes does. The first form ("\0filled BOOT-UUID
// VERSION", 77 bytes with an MD5) took a block of its own for each file filled, and gave it
// back when the mark went: two block allocations, and a block count that went 8, 16, 8 (`du`
// and `stat` changing twice, each change dropped from the kernel's cache by the mount's
// watch). Marks of that form are read as of an earlier boot. A boot is named by 32 bits: two
// boots named alike (one chance in 4 billion) matter only for a file whose content a power
// cut lost before its mark went.
import CDocDriveSys
import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
#endif

public enum Placeholder {
    public static let attribute = "user.docdrive.placeholder"
    /// Marks a pinned file or folder (kept on this device; a folder's files, also later ones).
    public static let pinAttribute = "user.docdrive.pinned"

    /// What a file's mark says.
    public enum Mark: Equatable, Sendable {
        /// A placeholder of this remote version (also a file filled in an earlier boot).
        case placeholder(String)
        /// Filled in this boot with this version; its mark goes once the content is on the disk.
        case filled(String)
    }

    /// The start of a "filled" mark's value: no remote version has a NUL byte.
    public static let filledPrefix = "\u{0}f"
    /// The start of the first form of it, with the whole boot id (read, never written).
    static let firstFilledPrefix = "\u{0}filled "

    /// Whether the mark's value `raw` is a "filled" mark (of this boot or another).
    static func isFilled(raw: String) -> Bool { raw.hasPrefix(filledPrefix) }

    /// This boot, in 8 hex digits: the first 4 bytes of the SHA-256 of its id
    /// (`/proc/sys/kernel/random/boot_id`, random at each boot); nil when it cannot be read
    /// (then fills are made durable at once and no "filled" mark is written).
    static let thisBoot: String? = {
        guard let s = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else { return nil }
        return bootToken(s.trimmingCharacters(in: .whitespacesAndNewlines))
    }()

    /// The token of the boot whose id is `id` (nil for an empty id or one with a space).
    public static func bootToken(_ id: String) -> String? {
        guard !id.isEmpty, !id.contains(" ") else { return nil }
        return Hex.encode(Array(SHA256.hash(data: Array(id.utf8)).prefix(4)))
    }

    /// The "filled" mark of `version` in this boot (nil without a boot id).
    static func filledValue(_ version: String) -> String? {
        thisBoot.map { filledPrefix + $0 + " " + version }
    }

    /// What the mark's value `raw` says, in the boot `boot` (a `bootToken`).
    public static func mark(raw: String, boot: String?) -> Mark {
        guard raw.hasPrefix(filledPrefix) else { return .placeholder(raw) }
        // The first form names its boot by the whole id, never a token: an earlier boot.
        let first = raw.hasPrefix(firstFilledPrefix)
        let rest = raw.dropFirst(first ? firstFilledPrefix.count : filledPrefix.count)
        guard let space = rest.firstIndex(of: " ") else { return .placeholder("") }
        let version = String(rest[rest.index(after: space)...])
        return !first && boot != nil && rest[..<space] == boot![...] ? .filled(version) : .placeholder(version)
    }

    /// The remote version a placeholder stands for, from any descriptor of it (O_PATH too);
    /// nil when the file is not a placeholder.
    public static func version(fd: Int32) -> String? {
        placeholderVersion(readMark { dd_getxattr_path(fd, attribute, $0, $1) })
    }

    /// The same from an open file (not O_PATH): no path through /proc to resolve.
    static func version(openFD fd: Int32) -> String? {
        placeholderVersion(readMark { dd_fgetxattr(fd, attribute, $0, $1) })
    }

    /// The mark's raw value on the open file `fd` (not O_PATH); nil without one.
    static func rawMark(openFD fd: Int32) -> String? {
        readMark { dd_fgetxattr(fd, attribute, $0, $1) }
    }

    private static func placeholderVersion(_ raw: String?) -> String? {
        guard let raw, case .placeholder(let v) = mark(raw: raw, boot: thisBoot) else { return nil }
        return v
    }

    /// The mark's value as `get` (a getxattr of it into a buffer) reads it; nil without one.
    private static func readMark(_ get: (UnsafeMutableRawPointer?, Int) -> Int) -> String? {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1024) { buf in
            let n = get(buf.baseAddress, buf.count)
            guard n >= 0 else { return nil }
            return String(decoding: buf[0..<n], as: UTF8.self)
        }
    }

    /// What the mark of the open file `fd` (not O_PATH) says, nil without one: one fgetxattr,
    /// on every open of a store's file.
    public static func mark(openFD fd: Int32) -> Mark? {
        rawMark(openFD: fd).map { mark(raw: $0, boot: thisBoot) }
    }

    /// The same from any descriptor (O_PATH too).
    public static func mark(fd: Int32) -> Mark? {
        readMark { dd_getxattr_path(fd, attribute, $0, $1) }.map { mark(raw: $0, boot: thisBoot) }
    }

    /// Whether the open file `fd` carries a "filled" mark of this boot (its content not known
    /// to be on the disk yet).
    static func isFilledHere(openFD fd: Int32) -> Bool {
        if case .filled = mark(openFD: fd) { return true }
        return false
    }

    /// Rewrites the mark of the open file `fd` (not O_PATH) to `value`.
    static func setMark(openFD fd: Int32, _ value: String) -> Bool {
        Array(value.utf8).withUnsafeBytes { dd_fsetxattr(fd, attribute, $0.baseAddress, $0.count, 0) } == 0
    }

    /// Whether the `size` bytes of the open file `fd` have the MD5 `version` (hex, as an S3
    /// ETag of an object written in one piece): false for any other kind of version, and for
    /// a file a crash left with holes or old blocks. Reads the whole file.
    public static func contentIs(_ version: String, fd: Int32, size: Int64) -> Bool {
        let hex = version.lowercased()
        guard hex.utf8.count == 32, hex.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else { return false }
        var md5 = Insecure.MD5()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var at: Int64 = 0
        while at < size {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(at)) }
            guard n > 0 else { return false }
            md5.update(data: buffer[0..<n])
            at += Int64(n)
        }
        return at == size && Hex.encode(Array(md5.finalize())) == hex
    }

    /// Whether the file `name` in the folder `dir` is a placeholder (never following a link).
    static func isPlaceholder(_ dir: Int32, _ name: ArraySlice<UInt8>) -> Bool {
        let fd = Beneath.withCName(name) { openat(dir, $0, dd_O_PATH | dd_O_NOFOLLOW | dd_O_CLOEXEC) }
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return version(fd: fd) != nil
    }

    static func mark(fd: Int32, version: String) -> Bool {
        Array(version.utf8).withUnsafeBytes { dd_setxattr_path(fd, attribute, $0.baseAddress, $0.count, 0) } == 0
    }

    /// The file is the user's now (filled, or truncated by an open).
    @discardableResult
    public static func clear(fd: Int32) -> Bool {
        dd_removexattr_path(fd, attribute) == 0 || errno == ENODATA
    }

    /// The same for an open file (not O_PATH).
    static func clear(openFD fd: Int32) -> Bool {
        dd_fremovexattr(fd, attribute) == 0 || errno == ENODATA
    }

    /// Whether `fd` (a file or folder, any descriptor) carries the pin mark.
    static func isPinned(fd: Int32) -> Bool {
        var b: UInt8 = 0
        return dd_getxattr_path(fd, pinAttribute, &b, 1) >= 0
    }

    static func setPinned(fd: Int32, _ on: Bool) -> Bool {
        if on { return dd_setxattr_path(fd, pinAttribute, "1", 1, 0) == 0 }
        return dd_removexattr_path(fd, pinAttribute) == 0 || errno == ENODATA
    }

    /// Makes `fd` (a new, empty file, open for writing) the placeholder of `r`: its size, mode
    /// and time, no blocks.
    static func fill(fd: Int32, as r: RemoteItem) -> Bool {
        // (fsetxattr: no path through /proc, as `mark` needs for an O_PATH descriptor.)
        guard ftruncate(fd, off_t(r.size)) == 0,
              Array(r.version.utf8).withUnsafeBytes({ dd_fsetxattr(fd, attribute, $0.baseAddress, $0.count, 0) }) == 0 else { return false }
        _ = fchmod(fd, r.meta.fileMode)
        setTimes(fd, r.meta.mtimeNanoseconds)
        return true
    }

    static func setTimes(_ fd: Int32, _ ns: Int64?) {
        guard let ns else { return }
        var times = [timespec(tv_sec: 0, tv_nsec: Int(dd_UTIME_OMIT)),
                     Timestamp.timespec(ns)]
        _ = futimens(fd, &times)
    }
}
