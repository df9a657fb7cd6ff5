// KernelCacheWatch: an inotify watch on every backing folder the kernel holds a node for, so that
// the kernel may keep entries and attributes long and still hears of changes made behind its back.
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The kernel caches a node's entry and attributes for as long as the drive says. To say long
/// (FileSystem+KernelCache), the drive must tell the kernel of every change it did not make
/// through the mount: made by other programs in a backing folder, by the drive's own sync, or by
/// a command of the control socket. All of these change a backing folder, and inotify reports
/// them for the folders it watches. Each backing folder the kernel holds a node for (in the
/// unified view) is watched while it does: added at the lookup that makes the node, removed when
/// the kernel forgets it.
///
/// Lock: `state` is a leaf, held across inotify_add_watch and inotify_rm_watch (never a
/// waiting call), so that a watch is never removed for one node while another adds it.
final class KernelCacheWatch: Sendable {
    /// A backing folder, by identity.
    struct Folder: Hashable, Sendable {
        let dev: UInt64
        let ino: UInt64
    }

    /// One reported change: `name` is empty for the folder itself.
    struct Event {
        let folder: Folder
        let mask: UInt32
        let name: [CChar]
    }

    static let mask = UInt32(IN_ATTRIB | IN_MODIFY | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
                             | IN_DELETE_SELF | IN_EXCL_UNLINK | IN_ONLYDIR)

    private struct State {
        var byWD: [Int32: (folder: Folder, users: Int)] = [:]
        var byFolder: [Folder: Int32] = [:]
        var noSpaceLogged = false
    }

    private let fd: Int32
    private let state = Mutex(State())
    private let stopped = Atomic<Bool>(false)
    private let running = Atomic<Bool>(false)

    init() {
        fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// True once `start` has run and until `stop`: only then are folders watched.
    var isRunning: Bool { running.load(ordering: .acquiring) }

    /// Watches the folder open at `folderFD` (any descriptor, O_PATH too) for one more node.
    /// Returns the watch descriptor, or nil when it cannot be watched (not running, or the
    /// user's inotify watches are used up: `noSpace` is then called once per mount).
    func add(folderFD: Int32, _ folder: Folder, noSpace: (Int32) -> Void) -> Int32? {
        guard isRunning else { return nil }
        return state.withLock { s -> Int32? in
            if let wd = s.byFolder[folder], let w = s.byWD[wd] {
                s.byWD[wd] = (w.folder, w.users + 1)
                return wd
            }
            let wd = "/proc/self/fd/\(folderFD)".withCString { inotify_add_watch(fd, $0, Self.mask) }
            guard wd >= 0 else {
                if !s.noSpaceLogged { s.noSpaceLogged = true; noSpace(errno) }
                return nil
            }
            // The kernel gives the same descriptor for a folder it watches already (a watch
            // whose IN_IGNORED is still unread): count it once more.
            if let w = s.byWD[wd], w.folder == folder {
                s.byWD[wd] = (folder, w.users + 1)
            } else {
                if let w = s.byWD[wd] { s.byFolder[w.folder] = nil }
                s.byWD[wd] = (folder, 1)
            }
            s.byFolder[folder] = wd
            return wd
        }
    }

    /// A node that held `wd` is gone: the folder is no longer watched once no node holds it.
    func remove(_ wd: Int32) {
        state.withLock { s in
            guard let w = s.byWD[wd] else { return }
            if w.users > 1 {
                s.byWD[wd] = (w.folder, w.users - 1)
                return
            }
            s.byWD[wd] = nil
            if s.byFolder[w.folder] == wd { s.byFolder[w.folder] = nil }
            _ = inotify_rm_watch(fd, wd)
        }
    }

    /// Starts the thread that reads the events and hands them to `handle` a batch at a time
    /// (`overflowed`: inotify's queue overflowed and events were lost). No-op without inotify.
    func start(_ handle: @escaping @Sendable (_ events: [Event], _ overflowed: Bool) -> Void) -> Bool {
        guard fd >= 0, !running.exchange(true, ordering: .acquiringAndReleasing) else { return false }
        let t = Thread { [self] in run(handle) }
        t.name = "docdrive-kcache"
        t.start()
        return true
    }

    /// Ends the thread within half a second; nothing is watched any more.
    func stop() {
        stopped.store(true, ordering: .releasing)
        running.store(false, ordering: .releasing)
    }

    /// How long a batch gathers after its first event (microseconds).
    static let settle: UInt32 = 3_000

    private func run(_ handle: ([Event], Bool) -> Void) {
        var buf = [UInt8](repeating: 0, count: 64 * 1024)
        while !stopped.load(ordering: .acquiring) {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, 500) > 0 else { continue }
            // A change seldom comes alone (a save, a download, a burst of creates): waiting a
            // moment makes one batch of it, one wake-up of this thread instead of one per
            // event (they cost more than the handling: a download of 1,000 small files woke it
            // for each file's three events).
            usleep(Self.settle)
            var events = [Event]()
            var overflowed = false
            // Everything queued now, in one batch (a burst's repeated events are merged by the
            // handler).
            while true {
                let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                parse(buf, n, into: &events, overflowed: &overflowed)
                if events.count > 8192 { break }
            }
            if !events.isEmpty || overflowed { handle(events, overflowed) }
        }
    }

    private func parse(_ buf: [UInt8], _ n: Int, into events: inout [Event], overflowed: inout Bool) {
        buf.withUnsafeBytes { raw in
            var o = 0
            while o + 16 <= n {
                let wd = raw.loadUnaligned(fromByteOffset: o, as: Int32.self)
                let mask = raw.loadUnaligned(fromByteOffset: o + 4, as: UInt32.self)
                let len = Int(raw.loadUnaligned(fromByteOffset: o + 12, as: UInt32.self))
                var name = [CChar]()
                if len > 0 {
                    let bytes = raw[(o + 16)..<min(n, o + 16 + len)].prefix { $0 != 0 }
                    name = bytes.map { CChar(bitPattern: $0) }
                }
                o += 16 + len
                if mask & UInt32(IN_Q_OVERFLOW) != 0 { overflowed = true; continue }
                let folder: Folder? = state.withLock { s in
                    guard let w = s.byWD[wd] else { return nil }
                    if mask & UInt32(IN_IGNORED) != 0 {
                        // The folder was removed (or its filesystem unmounted): no watch left.
                        s.byWD[wd] = nil
                        if s.byFolder[w.folder] == wd { s.byFolder[w.folder] = nil }
                    }
                    return w.folder
                }
                guard let folder, mask & UInt32(IN_IGNORED) == 0 else { continue }
                events.append(Event(folder: folder, mask: mask, name: name))
            }
        }
    }
}
