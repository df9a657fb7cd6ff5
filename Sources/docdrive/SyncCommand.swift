// SyncCommand: `docdrive sync`: wait until every saved file is on its store's remote.
import ArgumentParser
import DocDriveCore
import Foundation

struct Sync: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Wait until every file saved in a store is on its remote; fail naming the files that could not be synced.")

    @OptionGroup var drive: DriveOptions

    @Option(help: ArgumentHelp("Give up after this many seconds (default: wait as long as it takes).", valueName: "seconds"))
    var timeout: Double?

    func validate() throws {
        if let timeout, !(timeout.isFinite && timeout > 0 && timeout <= 31_536_000) {
            throw ValidationError("--timeout must be a number of seconds above 0 (at most a year); leave it out to wait as long as it takes.")
        }
    }

    func run() throws {
        try guarded {
            let home = drive.driveHome
            _ = try home.loadConfig()
            // Only read: a running daemon (perhaps of another version) owns the schema.
            let index = FileManager.default.fileExists(atPath: home.indexPath)
                ? try ItemIndex(readingOnly: home.indexPath) : try ItemIndex(path: home.indexPath)
            let queue = index.uploads
            let start = Date()
            let tty = isatty(2) != 0
            // No daemon: nothing uploads, and the remotes cannot be looked at. Said at once,
            // rather than waiting for a queue nobody drains.
            if home.liveMountRecord() == nil {
                let waiting = try queue.waitingCount()
                let files = "\(waiting) file\(waiting == 1 ? "" : "s") saved on this device \(waiting == 1 ? "waits" : "wait") for upload"
                if let dead = home.deadMountRecord() {
                    throw DriveError(.notMounted, "The drive's daemon (pid \(dead.pid)) stopped without unmounting (see its log \(home.logPath)); \(files). Mount the drive again (`docdrive mount DIR`) to upload \(waiting == 1 ? "it" : "them") and look at the remotes.")
                }
                if waiting > 0 {
                    throw DriveError(.notMounted, "The drive is not mounted: \(files). Mount it (`docdrive mount DIR`) and \(waiting == 1 ? "it goes" : "they go").")
                }
                print("The drive is not mounted: nothing saved on this device waits for upload (other devices' changes come in at the next mount).")
                return
            }
            // A close reaches the daemon a moment after it returns, and the daemon commits the
            // queue every 50 ms: the queue must be seen empty twice, 0.3 s apart.
            usleep(300_000)
            // Both directions: the daemon looks at the remotes (other devices' changes are
            // queued), the queue drains, and again until a round finds nothing to do.
            var offline = [String]()
            var answeredBefore = false
            var retryFailed = false, retriedFailed = false
            rounds: for round in 0..<20 {
                var sawWork = false
                let left = timeout.map { max(0.5, $0 - Date().timeIntervalSince(start)) } ?? 120
                var answer: SyncPollAnswer?
                // Not mounted though the check above found the daemon: it was unmounted and
                // uploads for its grace time with its control socket gone (Daemon.run), or it
                // stopped since. Then only the uploads this device queued are waited for, one
                // round; unanswered again, the sync ends. A daemon that answered the round before
                // and is gone now has stopped mid-sync. Any other failure (no answer, an
                // unreadable one, a protocol mismatch) is the sync's.
                switch Result(catching: { () throws(DriveError) in
                    try ControlClient.call(home, ControlRequest.SyncPoll(timeout: left, retryFailed: retryFailed ? true : nil, compare: round == 0 ? true : nil), timeout: Int(left) + 10)
                }) {
                case .success(let a):
                    answer = a
                    retryFailed = false
                case .failure(let e) where e.code == .notMounted && !answeredBefore:
                    if round > 0 { break rounds }
                case .failure(let e) where e.code == .notMounted:
                    throw DriveError(.notMounted, "The drive's daemon stopped during the sync; see its log \(home.logPath).")
                case .failure(let e): throw e
                }
                if let answer {
                    answeredBefore = true
                    offline = answer.stores.compactMap { name, state in
                        state.offlineSince == nil ? nil : "\(name): \(state.offlineReason ?? "offline")"
                    }.sorted()
                }
                let roundStart = Date()
                // Failed entries are retried within a second of their remote coming back: they
                // must look settled for a little longer before they are reported.
                var settled = 0
                while true {
                    let c = try queue.counts()
                    let waiting = try queue.waitingCount()
                    if waiting == 0 {
                        settled += 1
                        if settled >= ((c[.failed] ?? 0) > 0 ? 5 : 2) { break }
                    } else {
                        settled = 0
                        sawWork = true
                        // An offline store's changes wait for it: said below, not waited for.
                        if !offline.isEmpty && Date().timeIntervalSince(roundStart) > 2 { break rounds }
                        if tty { warn("\rWaiting for \(waiting) upload\(waiting == 1 ? "" : "s") (\(c[.uploading] ?? 0) in progress)...\u{1B}[K", newline: false) }
                    }
                    if let timeout, Date().timeIntervalSince(start) > timeout {
                        // Nothing waits (the remotes were looked at, the queue is idle, only
                        // failed files may be left): that is the answer, not a timeout. On a busy
                        // machine the settling and the one retry of failed files can take longer
                        // than a short --timeout, and "0 files are still waiting" said nothing.
                        if waiting == 0 { break rounds }
                        if tty { warn("") }
                        throw DriveError(.busy, "\(waiting) file\(waiting == 1 ? " is" : "s are") still waiting for upload after \(Int(timeout)) s (is the drive mounted and the remote reachable? see `docdrive status`).")
                    }
                    usleep(300_000)
                }
                if !offline.isEmpty { break }
                // A round that found nothing to do ends the sync. The first one only if the
                // daemon saw it idle too: its polls began after the sync did and queued
                // nothing, and no upload or download ended meanwhile (one that did may have
                // changed what another look would find). A look of a folder store of 100,000
                // items takes seconds.
                if !sawWork && (round > 0 || answer?.idle == true) {
                    // Before failed files are reported, each goes once more now: its last try
                    // may have failed just before its remote recovered (a remote failing only
                    // some requests never looks down), and its back-off may not have ended yet.
                    if !retriedFailed, (try queue.counts()[.failed] ?? 0) > 0 {
                        retriedFailed = true
                        retryFailed = true
                        continue
                    }
                    break
                }
            }
            if tty { warn("\r\u{1B}[K", newline: false) }
            // Files whose upload failed and stores that are offline are said together: a file's
            // retries can run out before its store is known offline, and which comes first is a
            // race the user must not see as two different answers.
            let failed = try queue.failures()
            for f in failed { warn("  \(RootKey(f.root)?.storeName ?? f.root)/\(f.path): \(f.error)") }
            let files = "\(failed.count) file\(failed.count == 1 ? "" : "s") could not be synced (listed above); the drive retries \(failed.count == 1 ? "it" : "them") by itself."
            if !offline.isEmpty {
                for o in offline { warn("  \(o)") }
                throw DriveError(.unreachable, "\(offline.count) store\(offline.count == 1 ? " is" : "s are") offline (listed above): changes wait here until the remote answers." + (failed.isEmpty ? "" : " " + files))
            }
            if !failed.isEmpty { throw DriveError(.io, files) }
            let conflicts = try index.bases.conflicts()
            for (_, c) in conflicts { warn("  conflict: \(c.store)/\(c.path): the version from \(c.device) is kept as \(c.copy)") }
            let synced = try queue.counts()[.synced] ?? 0
            if !conflicts.isEmpty { print("\(conflicts.count) conflict\(conflicts.count == 1 ? "" : "s") kept as copies (listed above); delete a copy once you have merged it.") }
            print("Everything is on the remotes (\(synced) path\(synced == 1 ? "" : "s") carried over so far).")
        }
    }
}
