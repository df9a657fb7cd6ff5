// PathClaims: the paths of a store its sync workers hold now (the path locks, LockOrder.md S1),
// and the folders they are making on the remote.
import Synchronization

/// The paths a store's sync workers hold: a path held stands for itself, the folders above it
/// and everything in it (`claim`, `release`; `StoreSync.tryLock`, `unlock`). And the folders a
/// worker is making on the remote now (`startMaking`): a worker that needs one of them waits for
/// it instead of making it too. (Every worker of a `cp -r` starts in the same new folder;
/// SeaweedFS answers the second of two conditional writes of one key after a retry of its own,
/// a second later.)
///
/// Rules (`State.broken`, checked after every change):
/// * no two held paths overlap: none is held twice, none is above another (the store itself,
///   the empty path, is above every path). A claim that overlaps a held path, or another path
///   of the same claim, is refused whole;
/// * the store itself is never a folder being made (it is there before any worker runs).
///
/// Lock: a leaf, held for the check and the change only (no system call, nothing else taken).
package final class PathClaims: Sendable {
    package struct State {
        /// The paths held, in the order they were claimed.
        package var held: [StorePath] = []
        /// The folders being made on the remote.
        package var making: Set<StorePath> = []

        package init() {}
    }

    private let state = Mutex(State())

    package init() {}

    /// Whether `a` and `b` overlap: one of them is the other, or a folder above it.
    package static func overlaps(_ a: StorePath, _ b: StorePath) -> Bool {
        func under(_ x: StorePath, _ y: StorePath) -> Bool {
            y.isEmpty || x == y || (x.bytes.count > y.bytes.count && x.bytes.starts(with: y.bytes) && x.bytes[y.bytes.count] == UInt8(ascii: "/"))
        }
        return under(a, b) || under(b, a)
    }

    /// Holds `paths`, unless one of them overlaps a held path or another of them: false then,
    /// and nothing is held.
    package func claim(_ paths: [StorePath]) -> Bool {
        state.withLock { s in
            for (k, p) in paths.enumerated() {
                if s.held.contains(where: { Self.overlaps($0, p) }) { return false }
                if paths[..<k].contains(where: { Self.overlaps($0, p) }) { return false }
            }
            s.held.append(contentsOf: paths)
            Invariants.check(s)
            return true
        }
    }

    /// Lets `paths` go (a path not held is passed over).
    package func release(_ paths: [StorePath]) {
        state.withLock { s in
            for p in paths { if let i = s.held.firstIndex(of: p) { s.held.remove(at: i) } }
            Invariants.check(s)
        }
    }

    /// Whether `path` (exactly) is held now.
    package func isHeld(_ path: StorePath) -> Bool {
        state.withLock { $0.held.contains(path) }
    }

    /// Marks `folder` as being made by the caller: false when another worker is making it.
    package func startMaking(_ folder: StorePath) -> Bool {
        state.withLock { s in
            let started = s.making.insert(folder).inserted
            Invariants.check(s)
            return started
        }
    }

    /// Whether a worker is making `folder` now.
    package func isMaking(_ folder: StorePath) -> Bool {
        state.withLock { $0.making.contains(folder) }
    }

    /// The caller's making of `folder` ended (made or not).
    package func doneMaking(_ folder: StorePath) {
        state.withLock { s in
            _ = s.making.remove(folder)
            Invariants.check(s)
        }
    }
}

// MARK: rules

extension PathClaims.State: CheckedState {
    package var broken: String? {
        let all = Set(held)
        if all.count != held.count {
            let twice = held.first { p in held.filter { $0 == p }.count > 1 }!
            return "PathClaims: \(twice) is held twice"
        }
        for p in held {
            var above = p
            while !above.isEmpty {
                above = above.folder
                if all.contains(above) { return "PathClaims: \(p) is held while \(above.isEmpty ? "the store" : above.description) is held too (held paths overlap)" }
            }
        }
        if making.contains(.store) { return "PathClaims: the store itself is a folder being made" }
        return nil
    }
}

extension PathClaims: CheckedState {
    package var broken: String? { state.withLock { $0.broken } }
}
