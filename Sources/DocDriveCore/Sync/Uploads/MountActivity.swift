// MountActivity: how busy the mount is, as its FUSE adapter tells, so that the uploads of a burst
// of changes can start once nothing is asked of the drive (see SyncService.holdUntil).
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// When the mount last served a request, and how many files are open for writing through it.
/// Lock-free: every FUSE request notes itself here.
public final class MountActivity: Sendable {
    /// Milliseconds since 1970 of the last request (0: no request yet, or no mount).
    private let lastRequest = Atomic<Int64>(0)
    private let writers = Atomic<Int>(0)

    public init() {}

    /// A request arrived. One coarse clock read, and a store only when 10 ms went by since the
    /// last one, so that the request threads seldom write the shared line.
    @inline(__always)
    public func noteRequest() {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &ts)
        let now = Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
        if now - lastRequest.load(ordering: .relaxed) >= 10 { lastRequest.store(now, ordering: .relaxed) }
    }

    /// A file was opened for writing through the mount, or such a file was released.
    public func writerOpened() { writers.add(1, ordering: .relaxed) }
    public func writerReleased() { writers.subtract(1, ordering: .relaxed) }

    /// Since when (seconds since 1970) the drive has been idle: nil while a file is open for
    /// writing through it (a large copy writes to the backing file without asking the daemon,
    /// FUSE passthrough) and before the mount served anything (then nothing here tells).
    var idleSince: Double? {
        let last = lastRequest.load(ordering: .relaxed)
        guard last > 0, writers.load(ordering: .relaxed) == 0 else { return nil }
        return Double(last) / 1000
    }
}
