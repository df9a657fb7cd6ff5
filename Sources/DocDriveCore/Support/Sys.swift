// Sys: the raw system calls of the file system core, each returning its result or throwing Errno.
import CDocDriveSys
import Foundation
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// Every raw call of the core goes through here, so errno is read in one place and EINTR retried.
enum Sys {
    static let O_PATH = dd_O_PATH
    static let O_NOFOLLOW = dd_O_NOFOLLOW
    static let O_DIRECTORY = dd_O_DIRECTORY
    static let O_DIRECT = dd_O_DIRECT
    static let O_CLOEXEC = dd_O_CLOEXEC
    static let AT_EMPTY_PATH = dd_AT_EMPTY_PATH
    static let AT_SYMLINK_NOFOLLOW = dd_AT_SYMLINK_NOFOLLOW
    static let AT_REMOVEDIR = dd_AT_REMOVEDIR

    /// Names the calling thread for the kernel (top, perf, /proc/PID/task/*/comm): Foundation's
    /// Thread.name does not reach it here. Cut to the kernel's 15 bytes.
    static func nameThisThread(_ name: String) {
        _ = c_pthread_setname_np(pthread_self(), String(decoding: Array(name.utf8.prefix(15)), as: UTF8.self))
    }

    /// Starts a thread running `body`, named `name` for Foundation and `kernelName` for the
    /// kernel (named from inside: a thread started from another keeps that one's name).
    static func startThread(_ name: String, kernelName: String, _ body: @escaping @Sendable () -> Void) {
        let t = Thread {
            nameThisThread(kernelName)
            body()
        }
        t.name = name
        t.start()
    }

    @inline(__always)
    static var lastErrno: Errno { Errno(rawValue: dd_errno()) }

    /// Runs a call that returns -1 on failure, retrying on EINTR.
    @inline(__always)
    static func check<T: FixedWidthInteger>(_ body: () -> T) throws(Errno) -> T {
        while true {
            let r = body()
            if r != -1 { return r }
            let e = dd_errno()
            if e != EINTR { throw Errno(rawValue: e) }
        }
    }

    static func openPath(_ dirfd: Int32, _ name: UnsafePointer<CChar>) throws(Errno) -> Int32 {
        try check { openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC) }
    }

    static func openPath(absolute path: String) throws(Errno) -> Int32 {
        try check { open(path, O_PATH | O_DIRECTORY | O_CLOEXEC) }
    }

    /// openat(2) for the drive's own reads of the backing folders (the query index's walks and
    /// content sniffing, the sync's walks): with O_NOATIME, so that what the drive reads for
    /// itself moves no access time (mail readers tell new mail by an atime older than the
    /// mtime; relatime moves it at the first read after each change); without it where the
    /// daemon may not (O_NOATIME is the owner's, or CAP_FOWNER's).
    static func openQuietly(_ dirfd: Int32, _ path: UnsafePointer<CChar>, _ flags: Int32) -> Int32 {
        let fd = openat(dirfd, path, flags | dd_O_NOATIME)
        if fd < 0 && errno == EPERM { return openat(dirfd, path, flags) }
        return fd
    }

    static func openQuietly(_ path: String, _ flags: Int32) -> Int32 {
        openQuietly(AT_FDCWD, path, flags)
    }

    /// The same for a reopen of the O_PATH descriptor `pathfd` (dd_reopen).
    static func reopenQuietly(_ pathfd: Int32, _ flags: Int32) -> Int32 {
        let fd = dd_reopen(pathfd, flags | dd_O_NOATIME)
        if fd < 0 && errno == EPERM { return dd_reopen(pathfd, flags) }
        return fd
    }

    /// A coarse monotonic clock in nanoseconds (a few milliseconds' resolution, no system call
    /// on Linux): for ages of entries in memory.
    static func monotonicNanoseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }

    static func stat(fd: Int32) throws(Errno) -> stat {
        var st = Glibc.stat()
        _ = try check { fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) }
        return st
    }

    static func stat(_ dirfd: Int32, _ name: UnsafePointer<CChar>) throws(Errno) -> stat {
        var st = Glibc.stat()
        _ = try check { fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) }
        return st
    }

    static func close(_ fd: Int32) {
        _ = Glibc.close(fd)  // never retried: the descriptor is gone either way
    }
}

/// pthread_setname_np(3) (a GNU extension: not in Glibc's module).
@_silgen_name("pthread_setname_np")
private func c_pthread_setname_np(_ thread: pthread_t, _ name: UnsafePointer<CChar>) -> Int32
