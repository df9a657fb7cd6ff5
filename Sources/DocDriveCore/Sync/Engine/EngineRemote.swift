// EngineRemote: a store's remote as the sync engine calls it: the same calls, each failure in the
// engine's own terms (a RemoteError becomes the engine's error here, and nowhere else).
import Foundation

/// The remote of a store, as `StoreSync` uses it. Forwards every call to `remote`; a failure is
/// the engine's error with the remote's sentence and its code mapped once (`DriveError.init(_:)`),
/// so the engine decides on one error type.
package struct EngineRemote: Sendable {
    package let remote: any Remote

    package init(_ remote: any Remote) { self.remote = remote }

    package var displayName: String { remote.displayName }

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
        try call { () throws(RemoteError) in
            try remote.upload(from: source, to: path, expecting: expecting, meta: meta, limit: limit, progress: progress)
        }
    }

    package func uploadDurableLater(from source: Int32, to path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta,
                            limit: BandwidthLimit?, progress: ((Int64, Int64) -> Void)?) throws(DriveError) -> (item: RemoteItem, folder: StorePath?) {
        try call { () throws(RemoteError) in
            try remote.uploadDurableLater(from: source, to: path, expecting: expecting, meta: meta, limit: limit, progress: progress)
        }
    }

    package func makeDurable(_ folders: Set<StorePath>) throws(DriveError) {
        try call { () throws(RemoteError) in try remote.makeDurable(folders) }
    }

    package func makeFolder(_ path: StorePath, meta: RemoteMeta) throws(DriveError) -> RemoteItem {
        try call { () throws(RemoteError) in try remote.makeFolder(path, meta: meta) }
    }

    package func makeSymlink(_ target: [UInt8], at path: StorePath, expecting: RemoteExpectation, meta: RemoteMeta) throws(DriveError) -> RemoteItem {
        try call { () throws(RemoteError) in try remote.makeSymlink(target, at: path, expecting: expecting, meta: meta) }
    }

    package func delete(_ path: StorePath, version: String) throws(DriveError) {
        try call { () throws(RemoteError) in try remote.delete(path, version: version) }
    }

    package func move(_ from: StorePath, version: String, to: StorePath) throws(DriveError) -> RemoteItem {
        try call { () throws(RemoteError) in try remote.move(from, version: version, to: to) }
    }

    package func reassign(_ path: StorePath, version: String, meta: RemoteMeta) throws(DriveError) -> RemoteItem {
        try call { () throws(RemoteError) in try remote.reassign(path, version: version, meta: meta) }
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
