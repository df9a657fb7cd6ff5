// WeakSubscribers: the subscribers of the config's watch (ConfigWatch), held
// weakly (a subscriber's life is its owner's) and told in the order they subscribed.
import Synchronization

final class WeakSubscribers<Subscriber>: Sendable {
    private struct Entry: @unchecked Sendable {
        weak var value: AnyObject?
    }
    /// Lock: leaf, copied out before the subscribers are told.
    private let list = Mutex<[Entry]>([])

    init() {}

    func add(_ s: Subscriber) {
        list.withLock { l in
            l.removeAll { $0.value == nil }
            l.append(Entry(value: s as AnyObject))
        }
    }

    func forEach(_ body: (Subscriber) -> Void) {
        for e in list.withLock({ $0 }) {
            if let s = e.value as? Subscriber { body(s) }
        }
    }
}
