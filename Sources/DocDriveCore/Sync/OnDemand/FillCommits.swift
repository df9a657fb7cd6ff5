// FillCommits: the content of filled placeholders made durable a burst at a time, after the
// opens that filled them returned.
//
// A placeholder's mark may go only once the content written into it is on the disk: a power
// cut before then could leave a file with no mark but zeros in it (blocks not written yet),
// which its base calls clean. An fsync per fill made that safe, at about a fifth of the CPU and
// the time of a small file's open. Now a fill rewrites the mark to "filled in this boot"
// (Placeholder.swift) and hands the file here. Once a burst of fills ends (`quiet`, at most
// `longest` after the first), one syncfs per file system puts them all on the disk, then each
// "filled" mark goes. Until then:
// * in this boot the file is whole, no placeholder: opens read it, its status is synced;
// * after a reboot it is a placeholder again (of the version it was filled with), since its
//   content may be lost: its next open downloads it again;
// * a writable open or a truncate settles it first (`settle`: fsync, then the mark goes), so
//   what the user writes is never taken for a placeholder's content after a power cut;
// * `docdrive sync` and the daemon's stop commit what is waiting.
// While fills wait, a file (`marker`, beside the store's downloads folder) says so: a daemon
// killed meanwhile leaves "filled" marks of this boot, and the next start, finding the file,
// looks for them in its walk of the local copy and commits them (those files are whole: the
// page cache has them). Without that, they would settle at their next writable open, or come
// down again after a reboot.
// Locks: `state` is a leaf; `transitions` (a file's "filled" mark going, or becoming a
// placeholder's by an eviction) is taken before FilledTimes' parts.
import CDocDriveSys
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

final class FillCommits: Sendable {
    private struct Pending {
        /// A descriptor of the filled file (a dup of the fill's), closed once committed.
        let fd: Int32
        let dev: UInt64
        let ino: UInt64
        /// The "filled" mark written: the mark goes only while it is still this one.
        let mark: String
        let times: FilledTimes?
    }

    private struct State {
        var files: [Pending] = []
        var first = 0.0
        var last = 0.0
        var running = false
        /// Batches taken and not committed yet (the marker stays while one is).
        var committing = 0
    }

    private let state = Mutex(State())
    /// Serializes changes of a file's mark away from "filled" (see the lock order above).
    let transitions = Mutex(())
    private let logger: Logger?
    private let name: String
    /// Exists while fills wait (nil: none is kept, as in tests without a store folder).
    let marker: String?

    /// A burst of fills has ended when none came for this long (DOCDRIVE_FILL_COMMIT_QUIET,
    /// seconds, for tests).
    static let quiet: Double = Tunables.process.fillCommitQuiet
    /// Fills wait at most this long after the first of a burst.
    static let longest = 10.0
    /// More files than this waiting: a fill makes its own content durable (as before). Each
    /// holds a descriptor: at most a sixteenth of the open-file limit (4,096 at most), and a
    /// batch goes once half of it waits (a burst of 1,000 small files is one batch, after it).
    static let most: Int = {
        var rl = rlimit()
        let limit = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &rl) == 0 ? Int(clamping: rl.rlim_cur) : 1024
        return max(16, min(4096, limit / 16))
    }()

    init(name: String, logger: Logger?, marker: String?) {
        self.name = name
        self.logger = logger
        self.marker = marker
    }

    /// Whether a daemon before this one stopped with fills waiting (its marker is there).
    var leftByAStop: Bool {
        guard let marker else { return false }
        return access(marker, F_OK) == 0
    }

    /// How many fills wait to be made durable (a fill checks it against `most`).
    var waiting: Int { state.withLock { $0.files.count } }

    /// Takes the file `fd` (open, just filled; its mark is `mark`, a "filled" one) to make
    /// durable later. False, with nothing taken, when too many wait or no descriptor is left:
    /// then the caller makes it durable itself.
    func add(fd: Int32, st: stat, mark: String, times: FilledTimes?) -> Bool {
        let own = dup(fd)
        guard own >= 0 else { return false }
        let now = ProcessInfo.processInfo.systemUptime
        let start = state.withLock { s -> Bool? in
            guard s.files.count < Self.most else { return nil }
            if s.files.isEmpty {
                s.first = now
                // (Once per burst, under the lock: the marker and the list agree.)
                if let marker { close(open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)) }
            }
            s.last = now
            s.files.append(Pending(fd: own, dev: UInt64(st.st_dev), ino: UInt64(st.st_ino), mark: mark, times: times))
            defer { s.running = true }
            return !s.running
        }
        guard let start else {
            close(own)
            return false
        }
        if start {
            Sys.startThread("docdrive-fill-commit", kernelName: "dd-fill-commit") { [self] in run() }
        }
        return true
    }

    /// Commits what waits, now, on the caller's thread (`docdrive sync`, the daemon's stop).
    func commitNow() {
        commit(state.withLock { s in
            defer {
                s.files = []
                s.committing += 1
            }
            return s.files
        })
    }

    /// The committing thread: waits for the end of the burst, commits, and ends when nothing
    /// is left (the next fill starts another).
    private func run() {
        while true {
            let now = ProcessInfo.processInfo.systemUptime
            let batch = state.withLock { s -> [Pending]? in
                if s.files.isEmpty {
                    s.running = false
                    return nil
                }
                guard now - s.last >= Self.quiet || now - s.first >= Self.longest || s.files.count >= Self.most / 2 else { return [] }
                defer {
                    s.files = []
                    s.committing += 1
                }
                return s.files
            }
            guard let batch else { return }
            if batch.isEmpty {
                usleep(UInt32(max(10_000, min(200_000, Self.quiet * 250_000))))
                continue
            }
            commit(batch)
        }
    }

    /// One syncfs per file system of `batch` (taken from `state`, counted in `committing`),
    /// then each file's "filled" mark goes; the marker goes when nothing waits any more.
    private func commit(_ batch: [Pending]) {
        defer {
            state.withLock { s in
                s.committing -= 1
                if s.files.isEmpty, s.committing == 0, let marker { unlink(marker) }
            }
        }
        guard !batch.isEmpty else { return }
        var synced = Set<UInt64>(), failed = Set<UInt64>()
        for p in batch where !synced.contains(p.dev) && !failed.contains(p.dev) {
            if dd_syncfs(p.fd) == 0 { synced.insert(p.dev) } else { failed.insert(p.dev) }
        }
        var lost = 0, reason = ""
        for p in batch {
            defer { close(p.fd) }
            // A file system whose syncfs failed: each file on its own. A file whose content
            // cannot be written to the disk is a placeholder again: its next open downloads it.
            guard synced.contains(p.dev) || fsync(p.fd) == 0 else {
                reason = String(cString: strerror(errno))
                lost += 1
                unfill(fd: p.fd, expected: p.mark)
                continue
            }
            clearFilled(fd: p.fd, ino: p.ino, expected: p.mark, times: p.times)
        }
        if lost > 0 {
            logger?.warning("store \(name): \(lost) downloaded file\(lost == 1 ? "" : "s") could not be written to the disk (\(reason)); \(lost == 1 ? "it is a placeholder" : "they are placeholders") again, downloaded at the next open")
        }
    }

    /// Makes the open file `fd`, still marked `expected` ("filled"), the placeholder of the
    /// version it was filled with.
    private func unfill(fd: Int32, expected: String) {
        transitions.withLock { _ in
            guard Placeholder.rawMark(openFD: fd) == expected,
                  case .placeholder(let version) = Placeholder.mark(raw: expected, boot: nil) else { return }
            _ = Placeholder.setMark(openFD: fd, version)
        }
    }

    /// Removes the "filled" mark `expected` of the open file `fd`, unless the mark changed
    /// meanwhile (settled, or evicted); the file keeps showing its placeholder's ctime.
    private func clearFilled(fd: Int32, ino: UInt64, expected: String?, times: FilledTimes?) {
        transitions.withLock { _ in
            guard let raw = Placeholder.rawMark(openFD: fd), expected == nil || raw == expected,
                  case .filled = Placeholder.mark(raw: raw, boot: Placeholder.thisBoot) else { return }
            var st = stat()
            let held = fstat(fd, &st) == 0 && times?.hold(ino: ino, real: st.st_ctim) == true
            let cleared = Placeholder.clear(openFD: fd)
            if held { times?.filled(ino: ino, after: cleared && fstat(fd, &st) == 0 ? st.st_ctim : nil) }
        }
    }

    /// Settles the open file `fd` (not O_PATH) when it carries a "filled" mark of this boot:
    /// its content goes to the disk, then the mark. Called before a writable open or a
    /// truncate makes it the user's file. False when the content could not be made durable
    /// (the open fails with EIO; the file stays as it is).
    func settle(fd: Int32, times: FilledTimes?) -> Bool {
        guard Placeholder.isFilledHere(openFD: fd) else { return true }
        guard fsync(fd) == 0 else { return false }
        var st = stat()
        clearFilled(fd: fd, ino: fstat(fd, &st) == 0 ? UInt64(st.st_ino) : 0, expected: nil, times: times)
        return true
    }
}
