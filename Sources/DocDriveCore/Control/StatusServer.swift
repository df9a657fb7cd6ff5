// StatusServer: the desktop status socket, `$XDG_RUNTIME_DIR/docdrive/status-HASH.sock`: file
// managers' extensions ask it the state of a batch of paths and subscribe to changes
// (StatusProtocol). A listener of its own rather than the control socket's: that one lives in
// the drive home, answers one JSON request per connection and is for the `docdrive` commands;
// this one is found by a file manager that knows no drive home, and its connections last.
// Its threads are its own: no FUSE request thread waits for it.
import CDocDriveSys
import Crypto
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

public final class StatusServer: Sendable {
    /// The folder of the sockets: `$XDG_RUNTIME_DIR/docdrive`, else `/run/user/UID/docdrive`
    /// when that runtime folder exists; nil without either (no status socket then).
    public static func folder(_ env: [String: String] = Tunables.processEnvironment) -> String? {
        if let x = env["XDG_RUNTIME_DIR"], x.hasPrefix("/") { return x + "/docdrive" }
        let run = "/run/user/\(geteuid())"
        var st = stat()
        guard lstat(run, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, st.st_uid == geteuid() else { return nil }
        return run + "/docdrive"
    }

    /// The socket's name for a mount point (one per mount; a remount reuses it).
    public static func socketName(mountpoint: String) -> String {
        "status-" + Hex.encode(SHA256.hash(data: Data(mountpoint.utf8)).prefix(6)) + ".sock"
    }

    private let listener: UnixSocketListener
    public var path: String { listener.path }
    private let mountpoint: String
    private let greeting: String
    private let service: FileStatusService
    private let logger: Logger
    private let stopped = Atomic<Bool>(false)
    /// The open connections by number. Lock: leaf (a connection's own locks are never taken under it).
    private let connections = Mutex<[Int: Connection]>([:])
    private let nextNumber = Atomic<Int>(0)
    /// How often the subscribers' files in a passing state (pending, uploading, downloading)
    /// are looked at again, while there are any; a marked change wakes the look at once.
    static let passingInterval = 0.4
    /// A burst of marks is gathered this long before the look.
    static let gather: useconds_t = 20_000

    public init(folder: String, mountpoint: String, home: DriveHome, service: FileStatusService, logger: Logger) throws(DriveError) {
        self.mountpoint = mountpoint
        self.service = service
        self.logger = logger
        greeting = StatusProtocol.greeting(mountpoint: mountpoint, home: home.path)
        // The folder is private (mode 0700, ours); one that is someone else's is not used.
        if mkdir(folder, 0o700) != 0 && errno != EEXIST { throw DriveError.io("Cannot make \(folder)", .init(rawValue: errno)) }
        var st = stat()
        guard lstat(folder, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, st.st_uid == geteuid(), st.st_mode & 0o077 == 0 else {
            throw DriveError(.notPermitted, "\(folder) is not a private folder of this user: no status socket for file managers.")
        }
        listener = try UnixSocketListener(folder: folder, name: Self.socketName(mountpoint: mountpoint), what: "the status socket")
    }

    public func start() {
        listener.start(thread: "docdrive-status", connectionThread: "docdrive-status-conn") { [self] c in serve(c) }
        // Pushes: the thread sleeps until a path is marked (a save, a sync, a fill, a pin) and
        // looks again only at subscribers' files in a passing state on a timer, and only while
        // there are such files. An idle drive wakes it for nothing.
        Sys.startThread("docdrive-status-look", kernelName: "status-look") { [self] in
            dd_background_thread()
            while !stopped.load(ordering: .relaxed) {
                service.waitForChanges(timeout: anyPassing() ? Self.passingInterval : 3600)
                guard !stopped.load(ordering: .relaxed) else { break }
                usleep(Self.gather)
                lookAgain()
            }
        }
    }

    public func stop() {
        stopped.store(true, ordering: .relaxed)
        service.wakeWaiter()
        listener.stop()
        for c in connections.withLock({ Array($0.values) }) { shutdown(c.fd, Int32(SHUT_RDWR)) }
    }

    // MARK: a connection

    final class Connection: Sendable {
        let fd: Int32
        /// Folders (relative to the mount root; "" is all) whose files' changes it is told.
        /// Lock: leaf.
        let subscriptions = Mutex<[String]>([])
        /// The last status line it was sent per path (relative), to tell it changes only, and
        /// whether that state was a passing one. Lock: leaf.
        let told = Mutex<[String: (line: String, passing: Bool)]>([:])
        /// Serializes writes: an answer and a change line never mix. Lock: taken alone; held
        /// across send(2), which gives up after 5 s (SO_SNDTIMEO): a client that stopped
        /// reading is disconnected rather than holding up the other subscribers.
        let writing = Mutex<Void>(())
        static let maxTold = 100_000

        init(fd: Int32) {
            self.fd = fd
            var tv = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        }

        /// Sends lines; false (and the connection shut, so that its reader ends) when they cannot go.
        @discardableResult
        func send(_ text: String) -> Bool {
            let sent = writing.withLock { _ in
                var bytes = Array(text.utf8)
                return bytes.withUnsafeMutableBytes { p -> Bool in
                    var done = 0
                    while done < p.count {
                        let w = Glibc.send(fd, p.baseAddress! + done, p.count - done, Int32(MSG_NOSIGNAL))
                        if w < 0 && errno == EINTR { continue }
                        if w <= 0 { return false }
                        done += w
                    }
                    return true
                }
            }
            if !sent { shutdown(fd, Int32(SHUT_RDWR)) }
            return sent
        }

        func remember(_ rel: String, _ line: (line: String, passing: Bool)) {
            told.withLock { t in
                if t.count >= Self.maxTold { t.removeAll(keepingCapacity: true) }
                t[rel] = line
            }
        }

        func isSubscribed(_ rel: String) -> Bool {
            subscriptions.withLock { subs in subs.contains { $0.isEmpty || rel == $0 || rel.hasPrefix($0 + "/") } }
        }
    }

    private func serve(_ c: Int32) {
        let peer = dd_peer_uid(c)
        guard peer == Int64(geteuid()) || peer == 0 else {
            _ = StatusProtocol.line(["error", "Only the drive's owner may ask it."]).withCString { Glibc.send(c, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            close(c)
            return
        }
        let conn = Connection(fd: c)
        let number = nextNumber.add(1, ordering: .relaxed).newValue
        connections.withLock { $0[number] = conn }
        defer {
            connections.withLock { _ = $0.removeValue(forKey: number) }
            if !conn.subscriptions.withLock({ $0.isEmpty }) { service.listening(false) }
            close(c)
        }
        guard conn.send(greeting) else { return }
        var pending = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 65536)
        while !stopped.load(ordering: .relaxed) {
            let n = read(c, &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            pending.append(contentsOf: buf[0..<n])
            while let nl = pending.firstIndex(of: 0x0A) {
                let line = String(decoding: pending[0..<nl], as: UTF8.self)
                pending.removeSubrange(0...nl)
                answer(line, on: conn)
            }
            // A file just told in a passing state is looked at again on the timer: the looking
            // thread, which may sleep until the next mark, learns so now.
            if conn.told.withLock({ $0.values.contains { $0.passing } }) { service.wakeWaiter() }
            if pending.count > StatusProtocol.maxLine {
                conn.send(StatusProtocol.line(["error", "The line is longer than \(StatusProtocol.maxLine / 1024 / 1024) MiB."]))
                return
            }
        }
    }

    /// The path relative to the mount root, or nil outside the mount.
    func relative(_ absolute: String) -> String? {
        var p = absolute
        while p.count > 1 && p.hasSuffix("/") { p.removeLast() }
        if p == mountpoint { return "" }
        guard p.hasPrefix(mountpoint + "/") else { return nil }
        return String(p.dropFirst(mountpoint.count + 1))
    }

    func absolute(_ rel: String) -> String { rel.isEmpty ? mountpoint : mountpoint + "/" + rel }

    private func statusLine(_ rel: String) -> (line: String, passing: Bool) {
        let (state, pinned) = service.status(rel)
        return (StatusProtocol.statusLine(absolute(rel), state, pinned: pinned), state.isPassing)
    }

    private func answer(_ text: String, on conn: Connection) {
        let request: StatusRequest
        switch StatusRequest.parse(Substring(text)) {
        case .success(let r): request = r
        case .failure(let e):
            conn.send(StatusProtocol.line(["error", e.message]))
            return
        }
        var out = ""
        switch request {
        case .status(let paths):
            for p in paths {
                guard let rel = relative(p) else {
                    out += StatusProtocol.statusLine(p, .none, pinned: false)
                    continue
                }
                let line = statusLine(rel)
                conn.remember(rel, line)
                out += line.line
            }
        case .subscribe(let paths):
            let rels = paths.compactMap(relative)
            let first = conn.subscriptions.withLock { subs -> Bool in
                let was = subs.isEmpty
                subs.append(contentsOf: rels)
                return was && !subs.isEmpty
            }
            if first { service.listening(true) }
        case .unsubscribe(let paths):
            let rels = Set(paths.compactMap(relative))
            let last = conn.subscriptions.withLock { subs -> Bool in
                let was = subs.isEmpty
                subs.removeAll { rels.contains($0) }
                return !was && subs.isEmpty
            }
            if last { service.listening(false) }
        case .conflicts(let paths):
            var seen = Set<String>()
            for p in paths {
                guard let rel = relative(p) else { continue }
                for c in service.conflicts(rel) where seen.insert(c.copy).inserted {
                    out += StatusProtocol.line(["conflict", absolute(c.document), absolute(c.copy), c.device])
                }
            }
        }
        conn.send(out + "done\n")
    }

    /// Tells each subscriber the new state of its files that changed: those marked since the
    /// last look, and those it was last told were passing (pending, uploading, downloading).
    /// Whether a subscriber was last told a passing state of one of its files.
    private func anyPassing() -> Bool {
        connections.withLock { Array($0.values) }.contains { c in c.told.withLock { $0.values.contains { $0.passing } } }
    }

    private func lookAgain() {
        let conns = connections.withLock { Array($0.values) }.filter { !$0.subscriptions.withLock { $0.isEmpty } }
        let changed = service.takeChanged()
        guard !conns.isEmpty else { return }
        var lines = [String: (line: String, passing: Bool)]()
        func line(_ rel: String) -> (line: String, passing: Bool) {
            if let l = lines[rel] { return l }
            let l = statusLine(rel)
            lines[rel] = l
            return l
        }
        for conn in conns {
            var candidates = Set(changed.filter(conn.isSubscribed))
            let passing = conn.told.withLock { t in t.filter(\.value.passing).map(\.key) }
            candidates.formUnion(passing.filter(conn.isSubscribed))
            var out = ""
            for rel in candidates {
                let l = line(rel)
                if conn.told.withLock({ $0[rel]?.line }) != l.line {
                    conn.remember(rel, l)
                    out += l.line
                }
            }
            if !out.isEmpty { conn.send(out) }
        }
    }
}
