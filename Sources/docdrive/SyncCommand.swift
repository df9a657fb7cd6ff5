// SyncCommand: `docdrive sync`: wait until every saved file is on its store's remote.
import ArgumentParser
import DocDriveCore
import Foundation

struct Sync: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Wait until every file saved in a store is on its remote; fail naming the files that could not be uploaded.")

    @OptionGroup var drive: DriveOptions

    @Option(help: ArgumentHelp("Give up after this many seconds (default: wait as long as it takes).", valueName: "seconds"))
    var timeout: Double?

    func run() throws {
        try guarded {
            let home = drive.driveHome
            _ = try home.loadConfig()
            let queue = try ItemIndex(path: home.indexPath).uploads
            let start = Date()
            let tty = isatty(2) != 0
            // A close reaches the daemon a moment after it returns, and the daemon commits the
            // queue every 50 ms: the queue must be seen empty twice, 0.3 s apart.
            usleep(300_000)
            // Failed entries are retried within a second of their remote coming back: they must
            // look settled for a little longer before they are reported.
            var settled = 0
            while true {
                let c = try queue.counts()
                let waiting = try queue.waitingCount()
                if waiting == 0 {
                    settled += 1
                    if settled >= ((c[.failed] ?? 0) > 0 ? 5 : 2) { break }
                } else {
                    settled = 0
                    if tty { warn("\rWaiting for \(waiting) upload\(waiting == 1 ? "" : "s") (\(c[.uploading] ?? 0) in progress)...\u{1B}[K", newline: false) }
                }
                if let timeout, Date().timeIntervalSince(start) > timeout {
                    if tty { warn("") }
                    throw DriveError(.busy, "\(waiting) file\(waiting == 1 ? " is" : "s are") still waiting for upload after \(Int(timeout)) s (is the drive mounted and the remote reachable? see `docdrive status`).")
                }
                usleep(300_000)
            }
            if tty { warn("\r\u{1B}[K", newline: false) }
            let failed = try queue.failures()
            if !failed.isEmpty {
                for f in failed { warn("  \(f.root.replacingOccurrences(of: "store:", with: ""))/\(f.path): \(f.error)") }
                throw DriveError(.io, "\(failed.count) file\(failed.count == 1 ? "" : "s") could not be uploaded (listed above); they are retried by themselves.")
            }
            let synced = try queue.counts()[.synced] ?? 0
            print("Everything is on the remotes (\(synced) path\(synced == 1 ? "" : "s") carried over so far).")
        }
    }
}
