// Migration: adopts an existing folder of documents into an app's container or a store (the
// seeds' "Migrating to iCloud Drive"), item by item, so that an interrupted run is finished by
// running it again: each file lands whole under its name (a temporary name, then a rename).
import CDocDriveSys
import Foundation
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

public struct Migration {
    public enum Mode: String, Sendable { case copy, move }

    public struct Report: Sendable {
        public var files = 0, folders = 0, links = 0, skipped = 0
        /// Names at the destination that hold something else: never overwritten.
        public var clashes: [String] = []
        /// Entries that are neither files, folders nor links (fifos, devices, sockets).
        public var unsupported: [String] = []
    }

    /// The ending of a file being copied; a run removes those an interrupted run left.
    static let tempSuffix = ".docdrive-migrating"

    let mode: Mode
    /// Called for every item that now exists at the destination (its path there), e.g. to
    /// give it an id; and every 200 items with the count so far, for progress.
    let adopted: (String) -> Void
    let progress: (Int) -> Void

    public init(mode: Mode, adopted: @escaping (String) -> Void = { _ in }, progress: @escaping (Int) -> Void = { _ in }) {
        self.mode = mode
        self.adopted = adopted
        self.progress = progress
    }

    /// Adopts everything in `source` into `destination` (both folders; the destination is made).
    public func run(source: String, destination: String) throws(DriveError) -> Report {
        let src = open(source, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard src >= 0 else { throw DriveError.io("Cannot open the folder \(source)", Errno(rawValue: errno)) }
        defer { close(src) }
        try DriveHome.makeFolder(destination)
        let dst = open(destination, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dst >= 0 else { throw DriveError.io("Cannot open the folder \(destination)", Errno(rawValue: errno)) }
        defer { close(dst) }
        var report = Report()
        try walk(src, dst, rel: "", destination: destination, &report)
        return report
    }

    private func walk(_ src: Int32, _ dst: Int32, rel: String, destination: String, _ r: inout Report) throws(DriveError) {
        // Leftovers of an interrupted run: a half-copied file is never kept.
        for name in Self.names(dst).valid where name.hasSuffix(Self.tempSuffix) { unlinkat(dst, name, 0) }
        let (names, unreadable) = Self.names(src)
        r.unsupported += unreadable.map { rel.isEmpty ? $0 : rel + "/" + $0 }
        for name in names {
            let path = rel.isEmpty ? name : rel + "/" + name
            var st = stat()
            guard fstatat(src, name, &st, Sys.AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            if name.utf8.count > Names.maxNameBytes || ReservedNames.isReserved(name) || name.hasSuffix(Self.tempSuffix) {
                r.unsupported.append(path)
                continue
            }
            var existing = stat()
            let exists = fstatat(dst, name, &existing, Sys.AT_SYMLINK_NOFOLLOW) == 0
            switch st.st_mode & S_IFMT {
            case S_IFDIR:
                if exists, existing.st_mode & S_IFMT != S_IFDIR { r.clashes.append(path); continue }
                if !exists, mkdirat(dst, name, st.st_mode & 0o7777) != 0 {
                    throw DriveError.io("Cannot create \(destination)/\(path)", Errno(rawValue: errno))
                }
                let s = openat(src, name, O_RDONLY | O_DIRECTORY | Sys.O_NOFOLLOW | O_CLOEXEC)
                let d = openat(dst, name, O_RDONLY | O_DIRECTORY | Sys.O_NOFOLLOW | O_CLOEXEC)
                defer { if s >= 0 { close(s) }; if d >= 0 { close(d) } }
                guard s >= 0, d >= 0 else { throw DriveError.io("Cannot open \(path)", Errno(rawValue: errno)) }
                try walk(s, d, rel: path, destination: destination, &r)
                r.folders += 1
                adopted(destination + "/" + path)
                if mode == .move { unlinkat(src, name, Sys.AT_REMOVEDIR) }  // only if emptied
            case S_IFREG:
                if exists {
                    // Done by an earlier run (same size and time), else someone else's file.
                    if existing.st_mode & S_IFMT == S_IFREG, existing.st_size == st.st_size, existing.st_mtim.tv_sec == st.st_mtim.tv_sec {
                        r.skipped += 1
                        if mode == .move { unlinkat(src, name, 0) }
                        adopted(destination + "/" + path)
                    } else {
                        r.clashes.append(path)
                    }
                    continue
                }
                try adoptFile(src, dst, name, st, shown: destination + "/" + path)
                r.files += 1
                adopted(destination + "/" + path)
            case S_IFLNK:
                if exists { r.skipped += 1; continue }
                var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let n = readlinkat(src, name, &buf, buf.count - 1)
                guard n >= 0 else { continue }
                buf[n] = 0
                guard symlinkat(buf, dst, name) == 0 else { throw DriveError.io("Cannot create \(destination)/\(path)", Errno(rawValue: errno)) }
                if mode == .move { unlinkat(src, name, 0) }
                r.links += 1
            default:
                r.unsupported.append(path)
            }
            let done = r.files + r.folders + r.links + r.skipped
            if done % 200 == 0 { progress(done) }
        }
    }

    /// One file into place: moved by rename where both are on one filesystem (atomic), else
    /// copied to a temporary name, synced, renamed (and then removed from the source if moving).
    private func adoptFile(_ src: Int32, _ dst: Int32, _ name: String, _ st: stat, shown: String) throws(DriveError) {
        if mode == .move, dd_renameat2(src, name, dst, name, UInt32(dd_RENAME_NOREPLACE)) == 0 { return }
        let tmp = "." + name.prefix(200) + Self.tempSuffix
        let input = openat(src, name, O_RDONLY | Sys.O_NOFOLLOW | O_CLOEXEC)
        guard input >= 0 else { throw DriveError.io("Cannot read \(shown)", Errno(rawValue: errno)) }
        defer { close(input) }
        let out = openat(dst, tmp, O_WRONLY | O_CREAT | O_TRUNC | Sys.O_NOFOLLOW | O_CLOEXEC, st.st_mode & 0o7777)
        guard out >= 0 else { throw DriveError.io("Cannot create \(shown)", Errno(rawValue: errno)) }
        var ok = false
        defer {
            close(out)
            if !ok { unlinkat(dst, tmp, 0) }
        }
        var buf = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buf.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw DriveError.io("Cannot read \(shown)", Errno(rawValue: errno)) }
            if n == 0 { break }
            var off = 0
            while off < n {
                let w = buf.withUnsafeBytes { write(out, $0.baseAddress! + off, n - off) }
                if w < 0 && errno == EINTR { continue }
                if w <= 0 { throw DriveError.io("Cannot write \(shown)", Errno(rawValue: w < 0 ? errno : ENOSPC)) }
                off += w
            }
        }
        var times = [st.st_atim, st.st_mtim]
        _ = futimens(out, &times)
        guard fsync(out) == 0 else { throw DriveError.io("Cannot write \(shown)", Errno(rawValue: errno)) }
        guard dd_renameat2(dst, tmp, dst, name, UInt32(dd_RENAME_NOREPLACE)) == 0 else {
            throw DriveError.io("Cannot put \(shown) in place", Errno(rawValue: errno))
        }
        ok = true
        if mode == .move { unlinkat(src, name, 0) }
    }

    /// The names in a folder (without . and ..), sorted so that runs go in the same order, and
    /// (shown with replacement characters) those that are not UTF-8, which are not adopted.
    static func names(_ fd: Int32) -> (valid: [String], unreadable: [String]) {
        let d = dup(fd)
        guard d >= 0, let dir = fdopendir(d) else { return ([], []) }
        defer { closedir(dir) }
        rewinddir(dir)
        var out = [String](), bad = [String]()
        while let e = readdir(dir) {
            withUnsafeBytes(of: e.pointee.d_name) { raw in
                let p = raw.baseAddress!.assumingMemoryBound(to: CChar.self)
                if let name = String(validatingCString: p) {
                    if name != "." && name != ".." { out.append(name) }
                } else {
                    bad.append(String(cString: p))
                }
            }
        }
        return (out.sorted(), bad)
    }
}
