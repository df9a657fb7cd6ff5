// StatusWatch: the daemon's side of the control socket's `status-watch`: the status now, then a
// new DriveStatus line each time something it shows changed (StatusChanges), at most one line
// per quarter second, and nothing while nothing changes.
import Foundation

extension DriveStatus {
    /// At most one pushed line per this interval: the changes within one come with the next line.
    public static let pushInterval: Duration = .milliseconds(250)

    /// How long a watching thread sleeps at most before it looks whether its command is still
    /// there (one poll(2) of its connection): a command that went away ends its thread within
    /// this time, also on a drive where nothing changes.
    public static let goneCommandCheck = 5.0

    /// The name of a watching thread (`/proc/PID/task/TID/comm`, 15 bytes at most).
    public static let watchThreadName = "dd-status-watch"

    /// Serves `status-watch` on `connection` (its own thread) until the command goes or the
    /// daemon stops (`changes.stop()`). `gather` is the daemon's `status` answer. The thread
    /// sleeps until a change, or `goneCommandCheck` to notice a command that went away.
    public static func watch(on connection: ControlConnection, changes: StatusChanges, gather: () -> DriveStatus) {
        Thread.current.name = watchThreadName
        changes.watching(true)
        defer { changes.watching(false) }
        var ticket = changes.ticket()
        var last = gather()
        guard connection.send(ControlAnswer.ok(last)) else { return }
        var sent = ContinuousClock.now
        while changes.wait(after: ticket, timeout: goneCommandCheck) {
            if changes.ticket() == ticket {
                // Nothing changed: woken only to look for a command that went away.
                if connection.isClosed { return }
                continue
            }
            let quiet = sent + pushInterval - ContinuousClock.now
            if quiet > .zero { Thread.sleep(forTimeInterval: Double(quiet.components.attoseconds) / 1e18 + Double(quiet.components.seconds)) }
            // Changes from here on wake the next round: none is lost while this one gathers.
            ticket = changes.ticket()
            if connection.isClosed { return }
            let now = gather()
            guard now.shows(differently: last) else { continue }
            guard connection.send(ControlAnswer.ok(now)) else { return }
            (last, sent) = (now, .now)
        }
    }

    /// Below this the drive home's disk counts as full (`docdrive status` says so).
    public static let homeDiskFullBelow: Int64 = 1 << 20

    /// Whether `self` shows something `other` does not: the free space on the drive home's disk
    /// moves with every write on it, and counts only when it crosses `homeDiskFullBelow`.
    func shows(differently other: DriveStatus) -> Bool {
        func full(_ s: DriveStatus) -> Bool { (s.homeDiskFree ?? .max) < Self.homeDiskFullBelow }
        var (a, b) = (self, other)
        (a.homeDiskFree, b.homeDiskFree) = (nil, nil)
        return a != b || full(self) != full(other)
    }
}
