// RemoteChecks: where a store's folder remote may be: a folder of its own (no other store's),
// outside the drive home and every local copy, given as an absolute path that is no symlink.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension DriveHome {
    /// Where `docdrive init` puts the example store's remote: the one part of the drive home
    /// that may hold remotes (nothing of the drive itself is there).
    public var remotesPath: String { path + "/remotes" }

    /// Throws one sentence for the first store whose folder remote is misplaced: a symlink
    /// (uploads never follow one, so it would never upload), two stores on one folder (or one
    /// inside the other's: each would take the other's files for its own), inside a store's
    /// local copy or the drive home (uploads would feed on themselves), or containing the
    /// drive home.
    public func checkRemotes(_ config: DriveConfig, file: String) throws(DriveError) {
        let home = Self.resolved(path)
        var seen = [(store: String, folder: String)]()
        var buckets = [(store: String, place: String)]()
        for store in config.stores {
            if case .s3(let s) = store.remote {
                // Two stores in one bucket need prefixes apart: each would take the other's objects for its own.
                let place = (URL(string: s.endpoint)?.host ?? s.endpoint) + "/" + s.bucket + (s.prefix.isEmpty ? "" : "/" + s.prefix)
                if let other = buckets.first(where: { Self.isInside(place, $0.place) || Self.isInside($0.place, place) }) {
                    throw DriveError(.invalidConfig, "\(file): the S3 remote of store \(store.name), \(s.displayName), is or holds the remote of store \(other.store); give each store a prefix of its own.")
                }
                buckets.append((store.name, place))
            }
            guard case .folder(let raw) = store.remote else { continue }
            let what = "\(file): the folder remote of store \(store.name), \(raw),"
            guard raw.hasPrefix("/") else {
                throw DriveError(.invalidConfig, "\(what) must be an absolute path.")
            }
            if raw.split(separator: "/").contains(where: { $0 == ".." || $0 == "." }) {
                throw DriveError(.invalidConfig, "\(what) must not contain \".\" or \"..\"; write the folder's own path.")
            }
            var st = stat()
            if lstat(raw, &st) == 0, st.st_mode & S_IFMT == S_IFLNK {
                let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: raw)) ?? "?"
                throw DriveError(.invalidConfig, "\(what) is a symbolic link (to \(target)); write the folder it leads to instead (`docdrive store add` does so itself).")
            }
            let folder = Self.resolved(raw)
            if Self.isInside(home, folder) {
                throw DriveError(.invalidConfig, "\(what) holds the drive home (\(home)); give a folder outside it.")
            }
            for other in config.stores {
                let cache = Self.resolved(cachePath(other.name))
                if Self.isInside(folder, cache) {
                    throw DriveError(.invalidConfig, "\(what) is inside the local copy of store \(other.name) (\(cache)); give a folder outside the drive home.")
                }
            }
            if Self.isInside(folder, home) && !Self.isInside(folder, Self.resolved(remotesPath)) {
                throw DriveError(.invalidConfig, "\(what) is inside the drive home (\(home)); give a folder outside it (or under \(remotesPath)).")
            }
            if let twin = seen.first(where: { $0.folder == folder }) {
                throw DriveError(.invalidConfig, "\(what) is also the remote of store \(twin.store); each store needs a folder of its own.")
            }
            if let outer = seen.first(where: { Self.isInside(folder, $0.folder) || Self.isInside($0.folder, folder) }) {
                throw DriveError(.invalidConfig, "\(what) is inside the remote of store \(outer.store) (\(outer.folder)), or holds it; each store needs a folder of its own, apart from the others.")
            }
            seen.append((store.name, folder))
        }
    }

    /// The absolute path with every symlink of its existing part resolved, and what does not
    /// exist yet appended as it is ("/nas/new/store" when only /nas exists).
    public static func resolved(_ p: String) -> String {
        var head = p
        var tail = [String]()
        while head.count > 1 {
            if let r = realpath(head, nil) {
                defer { free(r) }
                let base = String(cString: r)
                return tail.isEmpty ? base : (base == "/" ? "" : base) + "/" + tail.reversed().joined(separator: "/")
            }
            let ns = head as NSString
            tail.append(ns.lastPathComponent)
            head = ns.deletingLastPathComponent
        }
        return "/" + tail.reversed().joined(separator: "/")
    }

    /// Whether `inner` is `outer` or below it (both resolved).
    static func isInside(_ inner: String, _ outer: String) -> Bool {
        inner == outer || inner.hasPrefix(outer == "/" ? "/" : outer + "/")
    }
}
