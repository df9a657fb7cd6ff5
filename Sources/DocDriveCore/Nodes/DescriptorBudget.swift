// DescriptorBudget: how many node descriptors are open, against the open-file limit, and the
// anchors (one open folder per backing filesystem) that reopen an evicted node by its file handle.
import CDocDriveSys
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// How many node descriptors are open, against a budget taken from the open-file limit.
final class DescriptorBudget: Sendable {
    private let count = Atomic<Int>(0)
    /// Above `high`, idle nodes are closed down to `low`.
    let high: Int
    let low: Int
    let sweeping = Atomic<Bool>(false)

    init(limit: Int) {
        high = max(64, limit)
        low = high * 3 / 4
    }

    /// The process's: the open-file limit is the process's, and a node does not keep a
    /// reference of its own to it (8 bytes of every node).
    static let process = DescriptorBudget.fromResourceLimit()

    /// Three quarters of the process's open-file limit: the rest is for open files, folders and
    /// the index. DOCDRIVE_NODE_FD_BUDGET overrides it (tests use a tiny budget to exercise
    /// reopening).
    private static func fromResourceLimit() -> DescriptorBudget {
        if let n = Tunables.process.nodeDescriptorBudget { return DescriptorBudget(limit: n) }
        var rl = rlimit()
        let cur = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &rl) == 0 ? Int(clamping: rl.rlim_cur) : 1024
        // Nodes may use three quarters of the limit; the rest is for open files and folders,
        // the index and uploads (with a limit of 20,000 that leaves 5,000).
        return DescriptorBudget(limit: cur / 4 * 3)
    }

    /// After a sweep that could not reach `low`: the count at which to try again.
    private let retryAt = Atomic<Int>(0)

    func opened() { count.add(1, ordering: .relaxed) }
    func closed() { count.subtract(1, ordering: .relaxed) }
    var open: Int { count.load(ordering: .relaxed) }
    var isOver: Bool {
        let n = open
        return n > high && n > retryAt.load(ordering: .relaxed)
    }
    func postpone() { retryAt.store(open + max(32, high / 8), ordering: .relaxed) }
}

/// One open folder per backing filesystem, which open_by_handle_at needs to find a node again.
final class AnchorTable: Sendable {
    private let anchors = Mutex<[UInt64: Int32]>([:])
    /// The filesystem anchored last: lets `ensure` skip the lock in the common case.
    private let lastDev = Atomic<UInt64>(UInt64.max)
    /// Whether open_by_handle_at works here (it needs CAP_DAC_READ_SEARCH): 0 unknown, 1 yes, 2 no.
    private let handles = Atomic<Int>(0)

    var handlesUsable: Bool { handles.load(ordering: .relaxed) != 2 }

    /// True if nodes can be reopened from handles; the first call tries it once with `handle`.
    func handlesWork(_ handle: [UInt8], anchor: Int32) -> Bool {
        switch handles.load(ordering: .relaxed) {
        case 1: return true
        case 2: return false
        default:
            let fd = handle.withUnsafeBufferPointer {
                dd_open_by_handle(anchor, $0.baseAddress, Int32($0.count), Sys.O_PATH | Sys.O_NOFOLLOW)
            }
            if fd >= 0 {
                Sys.close(fd)
                handles.store(1, ordering: .relaxed)
                return true
            }
            // EPERM without the capability (a daemon run by a user): keep every descriptor open.
            if dd_errno() == EPERM { handles.store(2, ordering: .relaxed) }
            return false
        }
    }

    /// Makes sure `dev` has an anchor, from the folder `node` (called for each new folder node).
    func ensure(dev: UInt64, folder node: Int32) {
        if lastDev.load(ordering: .relaxed) == dev { return }
        anchor(dev: dev, node: node, isDirectory: true)
        lastDev.store(dev, ordering: .relaxed)
    }

    /// The anchor for `dev`, made from `node` if it is a folder and there is none yet; -1 if none.
    @discardableResult
    func anchor(dev: UInt64, node: Int32, isDirectory: Bool) -> Int32 {
        if let a = anchors.withLock({ $0[dev] }) { return a }
        guard isDirectory else { return -1 }
        let fd = dd_reopen(node, O_RDONLY | Sys.O_DIRECTORY)
        guard fd >= 0 else { return -1 }
        let (a, spare): (Int32, Int32) = anchors.withLock { m in
            if let a = m[dev] { return (a, fd) }
            m[dev] = fd
            return (fd, -1)
        }
        if spare >= 0 { Sys.close(spare) }
        return a
    }

    func closeAll() {
        let all = anchors.withLock { m -> [Int32] in
            defer { m.removeAll() }
            return Array(m.values)
        }
        for fd in all { Sys.close(fd) }
    }
}
