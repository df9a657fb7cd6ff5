// S3Parallel: several blocking requests at once from a worker thread (listing HEADs, parts),
// and the lock-protected box their threads share.
import Foundation
import Synchronization

/// Runs `body(0..<count)` on up to `width` threads and waits for all (the callers are blocking
/// worker threads; GCD's concurrentPerform would run no wider than the cores).
enum S3Parallel {
    static func forEach(_ count: Int, width: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let threads = min(width, count)
        if threads <= 1 {
            for i in 0..<count { body(i) }
            return
        }
        let next = Locked(0)
        let group = DispatchGroup()
        let owner = CrashGuard.currentStore  // they work for the caller's store
        for _ in 0..<threads {
            group.enter()
            let t = Thread {
                CrashGuard.working(for: owner)
                while true {
                    let i = next.update { n -> Int in
                        n += 1
                        return n - 1
                    }
                    if i >= count { break }
                    body(i)
                }
                group.leave()
            }
            t.start()
        }
        group.wait()
    }
}

/// A value several threads share, behind a lock (a class, so closures can hold it). Lock: leaf.
final class Locked<T: Sendable>: Sendable {
    private let mutex: Mutex<T>
    init(_ value: T) { mutex = Mutex(value) }
    var value: T { mutex.withLock { $0 } }
    @discardableResult
    func update<R: Sendable>(_ body: (inout T) -> R) -> R { mutex.withLock { body(&$0) } }
}
