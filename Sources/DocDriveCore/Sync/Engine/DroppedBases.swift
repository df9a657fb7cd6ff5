// DroppedBases: the files whose base a store's sync dropped because the remote no longer had
// them, with the local version the base named.
import Synchronization

/// Files whose base this device dropped because the remote no longer had them (deleted, or
/// moved away by another device), with the local version the base named (`note`). This
/// device's upload of that version, found at that path again (moved back by another device),
/// was recorded once: it is not an upload a stop kept from its record
/// (`StoreSync.ownUnrecordedUpload`). In memory: a restart forgets them.
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
        }
    }

    /// The local version the dropped base of `path` named.
    package func version(at path: StorePath) -> String? {
        state.withLock { $0.versions[path] }
    }

    package var count: Int { state.withLock { $0.versions.count } }
}

