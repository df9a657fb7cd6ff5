// Beneath: paths opened one name at a time beneath a folder descriptor, never following a symbolic
// link: what the uploader does in a store's cache and on a remote, whatever the path's length.
import CDocDriveSys
#if canImport(Glibc)
import Glibc
#endif

/// Every step is an openat of a single name with O_NOFOLLOW from the folder before it, so a path
/// is never longer than one name for the kernel (a store may hold paths longer than PATH_MAX,
/// which openat2 with RESOLVE_BENEATH would refuse whole) and a symlink met on the way stops
/// the walk instead of leading elsewhere. Names are never "." or ".." (StorePath.problem).
enum Beneath {
    /// Why a walk did not reach its folder: at which name (an index into the names) and what was there.
    enum Stop: Error {
        case missing(at: Int)
        case symlink(at: Int)
        case notFolder(at: Int)
        case failed(errno: Int32, at: Int)

        var index: Int {
            switch self {
            case .missing(let i), .symlink(let i), .notFolder(let i), .failed(_, let i): return i
            }
        }
    }

    /// Opens the folder `names` beneath `base` (O_RDONLY, a descriptor the caller closes); an empty
    /// list opens `base` itself again. `create`: missing folders are made (mode 0755), as mkdir -p.
    static func openFolder(_ base: Int32, _ names: [ArraySlice<UInt8>], create: Bool = false) -> Result<Int32, Stop> {
        var fd = base
        var owned = false
        func step(_ name: ArraySlice<UInt8>) -> Int32 {
            withCName(name) { openat(fd, $0, O_RDONLY | dd_O_DIRECTORY | dd_O_NOFOLLOW | dd_O_CLOEXEC) }
        }
        if names.isEmpty {
            let again = openat(base, ".", O_RDONLY | dd_O_DIRECTORY | dd_O_CLOEXEC)
            return again >= 0 ? .success(again) : .failure(.failed(errno: errno, at: 0))
        }
        for (i, name) in names.enumerated() {
            var next = step(name)
            if next < 0 && errno == ENOENT && create {
                let made = withCName(name) { mkdirat(fd, $0, 0o755) }
                if made == 0 || errno == EEXIST { next = step(name) }
            }
            if next < 0 {
                let e = errno
                let stop = classify(fd, name, e, at: i)
                if owned { close(fd) }
                return .failure(stop)
            }
            if owned { close(fd) }
            fd = next
            owned = true
        }
        return .success(fd)
    }

    /// What an openat of a folder that failed with `e` met at `name`.
    private static func classify(_ dfd: Int32, _ name: ArraySlice<UInt8>, _ e: Int32, at i: Int) -> Stop {
        switch e {
        case ENOENT: return .missing(at: i)
        case ELOOP, ENOTDIR:
            var st = Glibc.stat()
            if withCName(name, { fstatat(dfd, $0, &st, dd_AT_SYMLINK_NOFOLLOW) }) == 0 {
                return st.st_mode & S_IFMT == S_IFLNK ? .symlink(at: i) : .notFolder(at: i)
            }
            return .notFolder(at: i)
        default: return .failed(errno: e, at: i)
        }
    }

    /// lstat of `name` in the folder `dfd`; nil (errno set) when it cannot be read.
    static func stat(_ dfd: Int32, _ name: ArraySlice<UInt8>) -> Glibc.stat? {
        var st = Glibc.stat()
        return withCName(name) { fstatat(dfd, $0, &st, dd_AT_SYMLINK_NOFOLLOW) } == 0 ? st : nil
    }

    /// The target of the symlink `name` in `dfd`, as bytes.
    static func readLink(_ dfd: Int32, _ name: ArraySlice<UInt8>) -> [UInt8]? {
        var buf = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = withCName(name) { c in buf.withUnsafeMutableBytes { readlinkat(dfd, c, $0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count) } }
        guard n >= 0 else { return nil }
        return Array(buf[0..<n])
    }

    /// The names in the open folder `dfd` (not "." and ".."), as bytes, with their d_type.
    static func names(_ dfd: Int32) -> [(name: [UInt8], type: UInt8)]? {
        let own = Sys.openQuietly(dfd, ".", O_RDONLY | dd_O_DIRECTORY | dd_O_CLOEXEC)  // fdopendir takes it
        guard own >= 0 else { return nil }
        guard let dir = fdopendir(own) else {
            close(own)
            return nil
        }
        defer { closedir(dir) }
        var out = [(name: [UInt8], type: UInt8)]()
        while let ent = readdir(dir) {
            let name = withUnsafePointer(to: &ent.pointee.d_name) { t in
                t.withMemoryRebound(to: UInt8.self, capacity: 256) { Array(UnsafeBufferPointer(start: $0, count: strlen(UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self)))) }
            }
            if name == [UInt8(ascii: ".")] || name == [UInt8(ascii: "."), UInt8(ascii: ".")] { continue }
            out.append((name, ent.pointee.d_type))
        }
        return out
    }

    /// Removes `name` in the folder `dfd` with everything under it, never following a symlink;
    /// 0, or the errno of what could not be removed. What is already gone is fine: several
    /// workers may remove the files of a deleted folder and the folder itself side by side.
    static func removeTree(_ dfd: Int32, _ name: ArraySlice<UInt8>) -> Int32 {
        if withCName(name, { unlinkat(dfd, $0, 0) }) == 0 || errno == ENOENT { return 0 }
        guard errno == EISDIR else { return errno }
        let sub = withCName(name) { openat(dfd, $0, O_RDONLY | dd_O_DIRECTORY | dd_O_NOFOLLOW | dd_O_CLOEXEC) }
        guard sub >= 0 else { return errno == ENOENT ? 0 : errno }
        var failure: Int32 = 0
        for entry in names(sub) ?? [] {
            let e = removeTree(sub, entry.name[...])
            if e != 0 { failure = e }
        }
        close(sub)
        if failure != 0 { return failure }
        return withCName(name, { unlinkat(dfd, $0, dd_AT_REMOVEDIR) }) == 0 || errno == ENOENT ? 0 : errno
    }

    /// Opens the regular file `name` in `dfd` for reading without following a symlink and, where
    /// the kernel lets us (the owner, or root), without touching its atime: an upload or a compare
    /// is not a use of the file (mutt, tmpwatch and "recently used" lists read atimes).
    static func openForReading(_ dfd: Int32, _ name: ArraySlice<UInt8>) -> Int32 {
        withCName(name) { Sys.openQuietly(dfd, $0, O_RDONLY | dd_O_NOFOLLOW | dd_O_CLOEXEC) }
    }

    /// Calls `body` with `name` as a NUL-terminated C string (names hold no NUL: checked before).
    @inline(__always)
    static func withCName<C: Collection, R>(_ name: C, _ body: (UnsafePointer<CChar>) -> R) -> R where C.Element == UInt8 {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: name.count + 1) { buf in
            var i = 0
            for b in name {
                buf[i] = CChar(bitPattern: b)
                i += 1
            }
            buf[i] = 0
            return body(UnsafePointer(buf.baseAddress!))
        }
    }
}
