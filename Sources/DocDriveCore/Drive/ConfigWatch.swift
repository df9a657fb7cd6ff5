// ConfigWatch: the drive's one watch of config.yaml. A change made by `docdrive store add`, `app
// add` or an editor is parsed once and handed to every part that follows the config, in one
// order; a config that does not parse changes nothing (the last good one stays).
import CDocDriveSys
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif


/// Noticing is a `stat` of the file, at most every half second, done by whoever needs the config
/// fresh: the namespace when the mount's top level is read (a store added shows at once), the
/// sync's ticks, the query engine's loop. One of them parses and publishes it on the drive's
/// change stream (`.config`), whose subscribers follow it in their order (the namespace, so that
/// the mount shows a new store, then the sync, which starts it; then the query index); a check
/// while another runs returns at once.
public final class ConfigWatch: Sendable {
    private let home: DriveHome
    private var path: String { home.configPath }
    private struct Seen {
        var mtime: timespec
        var checked: Double
    }
    /// The file's time last parsed (or found unparsable), and when it was last looked at. Leaf.
    private let seen: Mutex<Seen>
    /// A check is telling the subscribers now.
    private let checking = Atomic<Bool>(false)
    /// Where a new config is published.
    private let changes: DriveChanges
    /// How often the file is looked at, at most.
    static let interval = 0.5

    /// `home`'s config.yaml, as it is now on the disk (what the caller has already loaded).
    public init(home: DriveHome, changes: DriveChanges) {
        self.home = home
        self.changes = changes
        seen = Mutex(Seen(mtime: Self.mtime(home.configPath), checked: Date().timeIntervalSince1970))
    }

    static func mtime(_ path: String) -> timespec {
        var st = stat()
        return dd_stat(path, &st) == 0 ? st.st_mtim : timespec()
    }

    /// The time of the config file the subscribers last heard of.
    public var mtime: timespec { seen.withLock { $0.mtime } }


    /// Looks at the file if it was not looked at in the last half second (`now`: at once); a
    /// changed file that parses goes to every subscriber.
    public func check(now: Bool = false) {
        let time = Date().timeIntervalSince1970
        let due = seen.withLock { s -> Bool in
            guard now || time - s.checked >= Self.interval else { return false }
            s.checked = time
            return true
        }
        guard due, checking.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged else { return }
        defer { checking.store(false, ordering: .releasing) }
        let m = Self.mtime(path)
        let changed = seen.withLock { s -> Bool in
            guard m.tv_sec != s.mtime.tv_sec || m.tv_nsec != s.mtime.tv_nsec else { return false }
            s.mtime = m
            return true
        }
        guard changed, let config = try? home.loadConfig() else { return }
        changes.publish(.config(config, mtime: m))
    }
}
