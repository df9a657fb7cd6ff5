// RecentlyDeleted: a file that a delete from the remote (another device's, or one made on the
// remote itself) takes from a store's local copy is kept a while, as iCloud Drive's Recently
// Deleted and Dropbox's deleted files are: it moves into the store's `deleted` folder beside its
// cache (one rename on the same disk, no copy), under the day of the delete and its path in the
// store, and goes once that day is `keepDays` old. A remote emptied by mistake (`rm -rf *` in the
// NAS folder leaves its hidden `.docdrive-store`; another share mounted at its path) then takes
// nothing for good from the devices, which delete what it no longer has within a poll.
import CDocDriveSys
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

package final class RecentlyDeleted: Sendable {
    /// `stores/NAME/deleted` in the drive home (on the cache's disk).
    package let folder: String
    /// The folder of the store whose own folder (`stores/NAME`) is `storeFolder`.
    package static func folder(ofStore storeFolder: String) -> String { storeFolder + "/deleted" }
    /// Days a kept file stays (its day folder goes when it is that old).
    package static let keepDays = 30
    private let lastSweep = Atomic<Int>(0)

    package init(folder: String) { self.folder = folder }

    /// The day folder of the moment `now` (UTC): "2026-12-06".
    package static func day(_ now: time_t) -> String {
        var t = now
        var parts = tm()
        gmtime_r(&t, &parts)
        return String(format: "%04d-%02d-%02d", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday))
    }

    /// Moves the file `name` of the open folder `dir` (the store's `path`) into today's folder
    /// under its path; a file of that path kept already today gets " 2", " 3", ... after its
    /// name. The path it is kept at (relative to `folder`), or nil with errno set when it could
    /// not be moved (then nothing changed).
    package func keep(_ dir: Int32, _ name: ArraySlice<UInt8>, as path: StorePath, now: time_t = time(nil)) -> String? {
        let day = Self.day(now)
        let top = open(folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        var made = top
        if top < 0 && errno == ENOENT {
            _ = mkdir(folder, 0o700)
            made = open(folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        }
        guard made >= 0 else { return nil }
        defer { close(made) }
        guard case .success(let into) = Beneath.openFolder(made, [Array(day.utf8)[...]] + path.folder.names, create: true) else {
            errno = ENOTDIR
            return nil
        }
        defer { close(into) }
        for n in 1...1000 {
            var target = Array(name)
            if n > 1 { target += Array(" \(n)".utf8) }
            let r = Beneath.withCName(name) { from in Beneath.withCName(target) { to in dd_renameat2(dir, from, into, to, UInt32(dd_RENAME_NOREPLACE)) } }
            if r == 0 {
                let folderPart = path.folder.isEmpty ? "" : String(decoding: path.folder.bytes, as: UTF8.self) + "/"
                return day + "/" + folderPart + String(decoding: target, as: UTF8.self)
            }
            if errno != EEXIST { return nil }
        }
        errno = EEXIST
        return nil
    }

    /// The files kept in the folder `folder` and the room they take (their blocks); (0, 0) when
    /// there is none. For `docdrive status`.
    package static func usage(of folder: String) -> (files: Int, bytes: Int64) {
        let top = open(folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard top >= 0 else { return (0, 0) }
        defer { close(top) }
        var files = 0
        var bytes: Int64 = 0
        StoreSync.forEachFile(top, .store) { _, _, _, st in
            files += 1
            bytes += Int64(st.st_blocks) * 512
        }
        return (files, bytes)
    }

    /// Removes the day folders older than `keepDays` (at most once an hour, unless `force`);
    /// how many it removed.
    @discardableResult
    package func sweep(now: time_t = time(nil), force: Bool = false) -> Int {
        let last = lastSweep.load(ordering: .relaxed)
        guard force || Int(now) - last >= 3600 else { return 0 }
        lastSweep.store(Int(now), ordering: .relaxed)
        let top = open(folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard top >= 0 else { return 0 }
        defer { close(top) }
        let oldest = Self.day(now - time_t(Self.keepDays * 86_400))
        var removed = 0
        for entry in Beneath.names(top) ?? [] {
            let day = String(decoding: entry.name, as: UTF8.self)
            // Only the day folders this makes ("YYYY-MM-DD" sorts as it dates); anything else stays.
            guard day.utf8.count == 10, day.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == "-") }), day < oldest else { continue }
            if Beneath.removeTree(top, entry.name[...]) == 0 { removed += 1 }
        }
        return removed
    }
}
