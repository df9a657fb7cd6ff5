// Downloads: the placeholders being filled, for the whole drive: one download per file however
// many wait for it, at most a store's `slots` at once (its lane), opens before readahead.
//
// A program that opens 5,000 placeholders at once (grep -r, xargs -P 64 cat, a thumbnailer)
// must not make 5,000 threads and 5,000 requests to the remote: each store has a lane with a
// fixed number of download threads, started when work comes and ended when the lane is empty,
// and two FIFO queues, one for opens (and pins: someone waits) and one for readahead. A free
// thread takes the oldest open first, so an open never waits behind readahead, only behind
// the downloads already going. Asking never waits: FUSE request threads ask.
//
// A file's states (`Entry.state`), by key (store root key, NUL, path):
//
//   (none) --request--> queued --a thread takes it--> running --ends--> (none): waiters told
//   (none) or queued --take--> taken --body done--> (none): waiters told nil (no placeholder now)
//   running --take--> refused (the taker waits for the download, then goes on with a whole file)
//
// A request for a key that has an entry adds its waiter to that entry; an open's request for a
// queued readahead puts the file in the open queue too (the first thread to take it runs it;
// the other queue's copy is skipped, as is any job whose ticket no longer names a queued entry).
import Foundation
import Synchronization

public final class Downloads: Sendable {
    public enum Priority: Sendable {
        /// Someone waits for it: an open, a truncate, a pin.
        case open
        /// Readahead: nobody asked for it yet.
        case ahead
    }

    public typealias Waiter = @Sendable (DriveError?) -> Void
    /// The download itself, told whether someone waits for it by now (nil: filled, or nothing
    /// to fill).
    public typealias Job = @Sendable (Priority) -> DriveError?

    private enum State { case queued, running, taken }

    private struct Entry {
        var ticket: Int
        var state: State
        var priority: Priority
        var waiters: [Waiter]
        var job: Job?
    }

    /// A FIFO of keys with the ticket of the request that put each there.
    private struct Fifo {
        var items: [(key: String, ticket: Int)] = []
        var head = 0
        var isEmpty: Bool { head == items.count }
        mutating func push(_ key: String, _ ticket: Int) { items.append((key, ticket)) }
        mutating func pop() -> (key: String, ticket: Int)? {
            guard head < items.count else { return nil }
            defer {
                head += 1
                if head == items.count {
                    items.removeAll(keepingCapacity: true)
                    head = 0
                } else if head >= 1024, head * 2 >= items.count {
                    items.removeFirst(head)
                    head = 0
                }
            }
            return items[head]
        }
    }

    /// One store's downloads.
    private struct Lane {
        var opens = Fifo()
        var ahead = Fifo()
        /// Threads of this lane now (each runs jobs until the lane is empty).
        var threads = 0
        var running = 0
    }

    private struct Table {
        var files: [String: Entry] = [:]
        var lanes: [String: Lane] = [:]
        var nextTicket = 0
    }

    /// Lock: leaf (no job, waiter or thread start runs under it).
    private let table = Mutex(Table())

    public init() {}

    /// The key of a store's file.
    public static func key(_ root: String, _ path: StorePath) -> String { root + "\0" + path.description }

    /// Asks for the file `key` to be filled by `job`, in the lane `lane` (a store's root key),
    /// which runs at most `slots` jobs at once; `done` is called, on a download thread, when it
    /// ended (with every other waiter of the same file). Returns at once.
    public func request(_ key: String, lane: String, slots: Int, priority: Priority, name: String,
                        job: @escaping Job, done: @escaping Waiter) {
        let start = table.withLock { t -> Bool in
            if var e = t.files[key] {
                e.waiters.append(done)
                let promoted = e.state == .queued && priority == .open && e.priority == .ahead
                if promoted { e.priority = .open }
                t.files[key] = e
                // Running or taken: its end tells this waiter too. Queued: it stays in its
                // lane, where a thread will come for it (an open goes to the front queue).
                guard promoted, t.lanes[lane] != nil else { return false }
                t.lanes[lane]!.opens.push(key, e.ticket)
                return false
            } else {
                t.nextTicket += 1
                t.files[key] = Entry(ticket: t.nextTicket, state: .queued, priority: priority, waiters: [done], job: job)
                if priority == .open {
                    t.lanes[lane, default: Lane()].opens.push(key, t.nextTicket)
                } else {
                    t.lanes[lane, default: Lane()].ahead.push(key, t.nextTicket)
                }
            }
            guard t.lanes[lane]!.threads < max(1, slots) else { return false }
            t.lanes[lane]!.threads += 1
            return true
        }
        guard start else { return }
        Sys.startThread("docdrive-download-\(name)", kernelName: "dd-download-\(name)") { [self] in work(lane) }
    }

    /// A lane's thread: takes the oldest open, else the oldest readahead, runs it, tells its
    /// waiters; ends when the lane has nothing queued.
    private func work(_ lane: String) {
        while true {
            let next = table.withLock { t -> (String, Job, Priority)? in
                while let (key, ticket) = t.lanes[lane]!.opens.pop() ?? t.lanes[lane]!.ahead.pop() {
                    guard var e = t.files[key], e.ticket == ticket, e.state == .queued, let job = e.job else { continue }
                    e.state = .running
                    e.job = nil
                    t.files[key] = e
                    t.lanes[lane]!.running += 1
                    return (key, job, e.priority)
                }
                // It gives up its name with its slot (one prctl, under the lock): the threads
                // named for downloads are never more than the slots, even while one that
                // ended is still exiting and another starts.
                Sys.nameThisThread("dd-ended")
                t.lanes[lane]!.threads -= 1
                if t.lanes[lane]!.threads == 0 { t.lanes[lane] = nil }
                return nil
            }
            guard let (key, job, priority) = next else { return }
            let failure = job(priority)
            let waiters = table.withLock { t -> [Waiter] in
                t.lanes[lane]!.running -= 1
                return t.files.removeValue(forKey: key)?.waiters ?? []
            }
            for w in waiters { w(failure) }
        }
    }

    /// Runs `body` (the placeholder becomes the user's file: an open with O_TRUNC, a truncate
    /// to 0) unless the file is being downloaded now; a download only queued is dropped, and
    /// its waiters (and those who ask meanwhile) are told it is filled: it is no placeholder
    /// any more. False, with nothing done, while a download runs.
    public func take(_ key: String, _ body: () -> Void) -> Bool {
        let free = table.withLock { t -> Bool in
            if var e = t.files[key] {
                guard e.state == .queued else { return false }
                e.state = .taken
                e.job = nil
                t.files[key] = e
                return true
            }
            t.nextTicket += 1
            t.files[key] = Entry(ticket: t.nextTicket, state: .taken, priority: .open, waiters: [], job: nil)
            return true
        }
        guard free else { return false }
        body()
        let waiters = table.withLock { $0.files.removeValue(forKey: key)?.waiters ?? [] }
        for w in waiters { w(nil) }
        return true
    }

    /// Whether the file is asked for (queued or downloading).
    public func isAsked(_ key: String) -> Bool {
        table.withLock { $0.files[key] != nil }
    }

    /// Whether the file is being downloaded now (not only queued).
    public func isRunning(_ key: String) -> Bool {
        table.withLock { $0.files[key]?.state == .running }
    }

    /// Downloads running now in the lane, and threads it has (for `status` and tests).
    public func load(lane: String) -> (running: Int, threads: Int) {
        table.withLock { t in (t.lanes[lane]?.running ?? 0, t.lanes[lane]?.threads ?? 0) }
    }
}
