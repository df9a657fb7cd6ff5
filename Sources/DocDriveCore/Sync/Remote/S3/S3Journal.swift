// S3ChangeMark: the object every DocDrive device rewrites after it changed an S3 store
// (`PREFIX.docdrive/changes`), so that a device finds with one HEAD, whatever the store's size,
// that no other device changed it since its last poll (docs/dev/remote-formats.md).
import Foundation

extension S3Remote {
    var changeMarkKey: String { keys.ownKey(S3Keys.ownFolder + "/changes") }

    /// The change mark's ETag ("absent" when there is none: a store no device of this version
    /// wrote yet). One HEAD, a few hundred bytes. Another tool's writes do not change it: a poll
    /// still lists the whole store once per `reconcile` (`fingerprintSeesEveryWriter`).
    public func fingerprint() throws(RemoteError) -> [UInt8]? {
        let r = try client.send(.HEAD, key: changeMarkKey)
        if r.status == 404 { return Array("absent".utf8) }
        guard r.status == 200, let etag = r.header("ETag"), !etag.isEmpty else {
            throw client.failure(r, "read the store's change mark")
        }
        return Array(Self.unquoted(etag).utf8)
    }

    public var fingerprintSeesEveryWriter: Bool { false }

    /// Rewrites the change mark with new content (a new ETag): every other device's next poll
    /// lists the store. Unconditional: two devices announcing at once both change it.
    public func announceChanges() throws(RemoteError) {
        let body = Array("DocDrive change mark 1\n\(UUID().uuidString)\n".utf8)
        let r = try client.send(.PUT, key: changeMarkKey, headers: [("Content-Type", "text/plain")], body: .bytes(body))
        guard r.status == 200 else { throw client.failure(r, "write the store's change mark") }
    }
}
