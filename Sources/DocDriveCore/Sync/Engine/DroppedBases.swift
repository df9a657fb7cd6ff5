// DroppedBases: the files whose base a store's sync dropped because the remote no longer had
// them, with the local version the base named.
import Synchronization

/// Files whose base this device dropped because the remote no longer had them (deleted, or
/// moved away by another device), with the local version the base named (`note`). This
/// device's upload of that version, found at that path again (moved back by another device),
/// was recorded once: it is not an upload a stop kept from its record
/// (`StoreSync.ownUnrecordedUpload`). In memory: a restart forgets them.
///
/// Rules (`State.broken`, checked after every change):
/// * at most `limit` (10,000) files are kept: the table is emptied when full (a file forgotten
///   only loses that one check);
/// * every version kept is a file's local version, never empty (a folder's is).
///
/// Lock: a leaf, held for a look-up or a change only.
package final class DroppedBases: Sendable {
    /// The most files kept.
    package static let limit = 10_000

    package struct State {
        package var versions: [StorePath: String] = [:]

        package init() {}
    }

    private let state = Mutex(State())

    package init() {}

    /// The base of the file at `path`, which named the local version `version`, was dropped (an
    /// empty version, a folder's, is not kept).
    package func note(_ path: StorePath, version: String) {
        guard !version.isEmpty else { return }
        state.withLock { s in
            if s.versions.count >= Self.limit { s.versions.removeAll() }
            s.versions[path] = version
            Invariants.check(s)
        }
    }

    /// The local version the dropped base of `path` named.
    package func version(at path: StorePath) -> String? {
        state.withLock { $0.versions[path] }
    }

    package var count: Int { state.withLock { $0.versions.count } }
}

// MARK: rules

extension DroppedBases.State: CheckedState {
    package var broken: String? {
        if versions.count > DroppedBases.limit { return "DroppedBases: \(versions.count) files kept, more than \(DroppedBases.limit)" }
        if let (p, _) = versions.first(where: { $0.value.isEmpty }) { return "DroppedBases: \(p) is kept with an empty version" }
        return nil
    }
}

extension DroppedBases: CheckedState {
    package var broken: String? { state.withLock { $0.broken } }
}
