// EngineRemote: a store's remote as the sync engine calls it: the same calls, each failure in the
// engine's own terms (a RemoteError becomes the engine's error here, and nowhere else).
import Foundation
import Synchronization

/// The remote of a store, as `StoreSync` uses it. Forwards every call to `remote`; a failure is
/// the engine's error with the remote's sentence and its code mapped once (`DriveError.init(_:)`),
/// so the engine decides on one error type.
package struct EngineRemote: Sendable {
    package let remote: any Remote
    /// The writes this device made on the remote since it last announced them (`announce`),
    /// shared by the copies of this value. Starts at one: the first announcement of a run also
    /// covers writes a stop of the last run made unannounced.
    private let unannounced = UnannouncedWrites()

    package init(_ remote: any Remote) { self.remote = remote }

    /// Tells the other devices of the writes made since the last time (`Remote.announceChanges`:
    /// S3's change mark), when there were any. A failure leaves them for the next call.
    /// Workers call it at once: the first takes the count, the others find none (what they wrote
    /// was done when the count was taken, so its announcement covers it).
    package func announce() {
        let n = unannounced.count.exchange(0, ordering: .acquiringAndReleasing)
        guard n > 0 else { return }
        do {
            try remote.announceChanges()
        } catch {
            unannounced.count.add(n, ordering: .releasing)
        }
    }

    /// Counts a write once it is done, whether it succeeded or not (one that failed may still have
    /// reached the remote): never before, or an announcement made meanwhile by another worker
    /// would take it while it has not landed, and nobody would announce it after.
    private func wrote() { unannounced.count.add(1, ordering: .releasing) }

    package var displayName: String { remote.displayName }

    package var fingerprintSeesEveryWriter: Bool { remote.fingerprintSeesEveryWriter }

    private func call<T>(_ body: () throws(RemoteError) -> T) throws(DriveError) -> T {
        do { return try body() } catch { throw DriveError(error) }
    }

    package func checkReachable() throws(DriveError) { try call { () throws(RemoteError) in try remote.checkReachable() } }

    package func listQuickly() throws(DriveError) -> RemoteListing {
        try call { () throws(RemoteError) in try remote.listQuickly() }
    }

    package func listQuickly(pages: (_ items: [RemoteItem], _ pending: Set<StorePath>) -> Void) throws(DriveError) -> RemoteListing {
        try call { () throws(RemoteError) in try remote.listQuickly(pages: pages) }
    }

    package func complete(_ listing: consuming RemoteListing) throws(DriveError) -> [RemoteItem] {
        do { return try remote.complete(listing) } catch { throw DriveError(error) }
    }

    package func fingerprint() throws(DriveError) -> [UInt8]? { try call { () throws(RemoteError) in try remote.fingerprint() } }

    package func item(at path: StorePath) throws(DriveError) -> RemoteItem? {
        try call { () throws(RemoteError) in try remote.item(at: path) }
    }

    package func download(_ path: StorePath, version: String?, to out: Int32,
                  progress: ((Int64, Int64) -> Void)?) throws(DriveError) -> RemoteItem {
        try call { () throws(RemoteError) in try remote.download(path, version: version, to: out, progress: progress) }
    }

    package func upload(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(DriveError) -> RemoteItem {
        defer { wrote() }
        return try call { () throws(RemoteError) in
            try remote.upload(from: source, to: path, expecting: expecting, meta: meta, limit: limit, progress: progress)
        }
    }

    package func uploadDurableLater(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                            limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(DriveError) -> (item: RemoteItem, folder: StorePath?) {
        defer { wrote() }
        return try call { () throws(RemoteError) in
            try remote.uploadDurableLater(from: source, to: path, expecting: expecting, meta: meta, limit: limit, progress: progress)
        }
    }

    package func makeDurable(_ folders: Set<StorePath>) throws(DriveError) {
        try call { () throws(RemoteError) in try remote.makeDurable(folders) }
    }

    package func makeFolder(_ path: StorePath, meta: RemoteMeta) throws(DriveError) -> RemoteItem {
        defer { wrote() }
        return try call { () throws(RemoteError) in try remote.makeFolder(path, meta: meta) }
    }

    package func makeSymlink(_ target: [UInt8], at path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta) throws(DriveError) -> RemoteItem {
        defer { wrote() }
        return try call { () throws(RemoteError) in try remote.makeSymlink(target, at: path, expecting: expecting, meta: meta) }
    }

    package func delete(_ path: StorePath, version: String) throws(DriveError) {
        defer { wrote() }
        try call { () throws(RemoteError) in try remote.delete(path, version: version) }
    }

    package func move(_ from: StorePath, version: String, to: StorePath) throws(DriveError) -> RemoteItem {
        defer { wrote() }
        return try call { () throws(RemoteError) in try remote.move(from, version: version, to: to) }
    }

    package func reassign(_ path: StorePath, version: String, meta: RemoteMeta) throws(DriveError) -> RemoteItem {
        defer { wrote() }
        return try call { () throws(RemoteError) in try remote.reassign(path, version: version, meta: meta) }
    }

    package func picture(item id: String) throws(DriveError) -> [UInt8]? {
        try call { () throws(RemoteError) in try remote.picture(item: id) }
    }

    package func putPicture(item id: String, _ png: [UInt8]) throws(DriveError) {
        try call { () throws(RemoteError) in try remote.putPicture(item: id, png) }
    }

    package func removeStaleUploads() -> Int { remote.removeStaleUploads() }

    package func finishCleanup() { remote.finishCleanup() }
}

/// How many writes a device made on a remote since it last announced them (`EngineRemote`).
private final class UnannouncedWrites: Sendable {
    let count = Atomic<Int>(1)
}
