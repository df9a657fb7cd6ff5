// CrashGuard: a fault that kills the daemon while it works for a store leaves a marker naming
// the store (CDocDriveSys/crashguard.c), and the next mount keeps that store offline with the
// reason, instead of dying in it again at every start.
import CDocDriveSys
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The states of a store's crash marker, `run/crashed/NAME` in the drive home:
/// * none: the store starts at mount as always;
/// * written (by the fault handler, as the process dies): the next daemon finds it and keeps
///   the store *held*: offline, its remote untouched, its local copy served as it is, changes
///   noted and queued for later; `docdrive status` says why;
/// * removed by `docdrive store retry NAME`: the running daemon starts the store within a
///   second (`SyncService.startHeldStores`), and the next mount starts it as always.
/// A thread works for a store from the moment it says so (`working(for:)`): the store's poller,
/// its upload workers, the threads they start, and the mount's first comparison of it.
public enum CrashGuard {
    /// The folder of the markers.
    public static func folder(_ home: DriveHome) -> String { home.runPath + "/crashed" }

    /// Makes the daemon write a marker when a fault kills it on a thread that works for a store.
    public static func install(_ home: DriveHome) throws(DriveError) {
        let dir = folder(home)
        if mkdir(dir, 0o700) != 0 && errno != EEXIST {
            throw DriveError.io("cannot make \(dir)", .init(rawValue: errno))
        }
        guard dd_crash_guard_install(dir) == 0 else { throw DriveError.io("cannot watch for faults", .init(rawValue: errno)) }
    }

    /// The calling thread works for the store `name` (nil: for none) from now on.
    public static func working(for name: String?) {
        if let name { dd_crash_guard_thread_store(name) } else { dd_crash_guard_thread_store(nil) }
    }

    /// The store the calling thread works for (a thread it starts works for it too).
    public static var currentStore: String? {
        let s = String(cString: dd_crash_guard_current_store())
        return s.isEmpty ? nil : s
    }

    /// Runs `body` on the calling thread as work for `name`, then gives the thread back.
    public static func working<T>(for name: String, _ body: () throws -> T) rethrows -> T {
        let before = currentStore
        working(for: name)
        defer { working(for: before) }
        return try body()
    }

    /// The stores whose marker is there, each with the sentence `docdrive status` shows.
    public static func held(_ home: DriveHome) -> [String: String] {
        let dir = folder(home)
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: dir) else { return [:] }
        var out = [String: String]()
        for name in names {
            var st = stat()
            guard lstat(dir + "/" + name, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { continue }
            let text = (try? String(contentsOfFile: dir + "/" + name, encoding: .utf8)) ?? ""
            out[name] = reason(store: name, marker: text, at: Double(st.st_mtim.tv_sec))
        }
        return out
    }

    /// The sentence for a marker ("signal 4").
    static func reason(store: String, marker: String, at time: Double) -> String {
        let number = marker.split(separator: " ").last.flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        let what: String
        switch number {
        case SIGILL, SIGTRAP: what = "a check in DocDrive failed"
        case SIGSEGV, SIGBUS: what = "DocDrive read or wrote memory it may not"
        case SIGABRT: what = "DocDrive aborted"
        case SIGFPE: what = "an arithmetic fault in DocDrive"
        default: what = "a fault in DocDrive"
        }
        let f = DateFormatter()
        f.dateFormat = "yyyy-MM-dd HH:mm:ss"
        let when = f.string(from: Date(timeIntervalSince1970: time))
        return "The daemon stopped at \(when) while it worked on this store (\(what); the log has the details), so it is held offline to let the drive mount; `docdrive store retry \(store)` tries it again"
    }

    /// Removes the marker of `store`; false when there was none.
    @discardableResult
    public static func clear(_ home: DriveHome, store: String) -> Bool {
        unlink(folder(home) + "/" + store) == 0
    }
}
