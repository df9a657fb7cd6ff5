// S3Journal: an S3 store's change journal (docs/dev/remote-formats.md, "The change journal"). After
// each batch of its writes a device puts one small object under `PREFIX.docdrive/journal/`
// naming what it wrote, then rewrites the change mark (`PREFIX.docdrive/changes`). A poll is one
// HEAD of the mark; only when it changed does a device list the journal after its cursor and
// decide again the paths the new objects name, instead of listing the whole store.
import Foundation
import Synchronization

extension S3Remote {
    var changeMarkKey: String { keys.ownKey(S3Keys.ownFolder + "/changes") }
    var journalPrefix: String { keys.ownKey(S3Keys.ownFolder + "/journal/") }

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

    public var keepsJournal: Bool { true }

    /// The server's time now (from its last answer's `Date`; one HEAD of the mark if there was
    /// none yet), in milliseconds.
    public func journalTime() throws(RemoteError) -> Int64? {
        if let t = client.serverClock.now { return t }
        _ = try fingerprint()
        return client.serverClock.now
    }

    /// Puts the batch's journal object (create-only), then rewrites the change mark with new
    /// content (a new ETag): every other device's next poll reads the journal. The mark is
    /// unconditional: two devices announcing at once both change it.
    public func announceChanges(_ batch: JournalBatch) throws(RemoteError) {
        var rest = batch.changes[...]
        repeat {
            var part = batch
            part.changes = Array(rest.prefix(S3JournalFormat.maxChanges))
            rest = rest.dropFirst(part.changes.count)
            try putJournalObject(part)
        } while !rest.isEmpty
        let body = Array("DocDrive change mark 2\n\(UUID().uuidString)\n".utf8)
        let r = try client.send(.PUT, key: changeMarkKey, headers: [("Content-Type", "text/plain")], body: .bytes(body))
        guard r.status == 200 else { throw client.failure(r, "write the store's change mark") }
        removeOldJournalObjects()
    }

    private func putJournalObject(_ batch: JournalBatch) throws(RemoteError) {
        let body = S3JournalFormat.encode(batch, keys: keys)
        for _ in 0..<5 {
            guard let time = try journalTime() else {
                throw RemoteError(.unreachable, "The S3 endpoint \(client.endpointName) gave no time (Date) with its answers: the store's journal cannot be written.")
            }
            let name = JournalKey.name(time: time, device: batch.device, seq: journalSeq.add(1, ordering: .relaxed).newValue)
            let r = try client.send(.PUT, key: journalPrefix + name,
                                    headers: [("Content-Type", "application/json"), ("If-None-Match", "*")], body: .bytes(body))
            if r.status == 200 { return }
            guard r.status == 412 else { throw client.failure(r, "write the store's journal") }
            // The name is taken (a device id used twice): the next number.
        }
        throw RemoteError(.changed, "Cannot write the store's journal on \(displayName): five names in a row were taken.")
    }

    /// The journal after `cursor`: the other devices' batches, oldest first. A LIST of the
    /// journal's folder from the cursor's time less its window, and a GET of each object not
    /// applied yet. An object that cannot be read stops the reading there (`unreadable`).
    public func readJournal(after cursor: JournalCursor) throws(RemoteError) -> JournalPage {
        var page = JournalPage(cursor: cursor)
        var read = [(key: String, time: Int64)]()
        var token: String?
        var pages = 0
        repeat {
            let (listed, next) = try listPage(keyPrefix: journalPrefix, token: token, maxKeys: 1000,
                                              startAfter: journalPrefix + JournalKey.first(atTime: cursor.listFrom))
            for c in listed {
                let key = c.key
                guard key.hasPrefix(journalPrefix) else { continue }
                let name = String(key.dropFirst(journalPrefix.count))
                // Another tool's object in the journal's folder names no change: passed.
                guard let time = JournalKey.time(of: name), let writer = JournalKey.device(of: name),
                      !cursor.applied.contains(name) else { continue }
                read.append((name, time))
                // This device's own; or older than the listing the cursor started at, which showed it.
                if writer == device || time < cursor.covered { continue }
                let size = c.size
                guard size <= S3JournalFormat.maxBytes else {
                    page.unreadable = (name, "it is \(size) bytes, more than a journal object holds (\(S3JournalFormat.maxBytes))")
                    page.cursor = cursor.advanced(by: read)
                    return page
                }
                let g = try client.send(.GET, key: key)
                guard g.status == 200 || g.status == 404 else { throw client.failure(g, "read the journal object \(name)") }
                do throws(S3JournalFormat.Refusal) {
                    guard g.status == 200 else { throw .init("it was removed before it was read") }
                    let batch = try S3JournalFormat.decode(g.body, keys: keys)
                    guard batch.device == writer else { throw .init("it names the device \(batch.device), its name another") }
                    page.batches.append((name, batch))
                } catch {
                    page.unreadable = (name, error.why)
                    page.cursor = cursor.advanced(by: read)
                    return page
                }
            }
            token = next
            pages += 1
        } while token != nil && pages < 10
        if token != nil {
            page.unreadable = (read.last?.key ?? "", "more than 10,000 journal objects are new")
        }
        page.cursor = cursor.advanced(by: read)
        return page
    }

    /// Removes journal objects older than `S3JournalFormat.retention`, at most once an hour
    /// per run, one page at a time (the oldest names come first). Failures wait for the next.
    func removeOldJournalObjects() {
        let now = client.serverClock.now ?? 0
        let last = journalSwept.load(ordering: .relaxed)
        guard now > 0, now - last > 3_600_000, journalSwept.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged else { return }
        guard let listed = try? listObjects(keyPrefix: journalPrefix, limit: 1000) else { return }
        for c in listed {
            guard c.key.hasPrefix(journalPrefix), let t = JournalKey.time(of: String(c.key.dropFirst(journalPrefix.count))),
                  now - t > S3JournalFormat.retention else { continue }
            _ = try? client.send(.DELETE, key: c.key)
        }
    }
}

/// The body of a journal object: JSON, UTF-8.
///
///     {"format": "docdrive-journal 1", "device": "ID", "deviceName": "NAME", "whole": false,
///      "changes": [{"op": "put", "path": "A/b.txt", "id": "ID", "version": "ETAG", "previous": "ETAG"},
///                  {"op": "move", "from": "A/b.txt", "path": "B/b.txt", "id": "ID", "version": "ETAG"},
///                  {"op": "delete", "path": "C", "previous": "ETAG"}]}
///
/// A path is the object's key after the store's prefix (`S3Keys`: names S3 cannot hold are
/// escaped the same way); a folder's path has no "/" at its end.
public enum S3JournalFormat {
    public static let format = "docdrive-journal 1"
    /// The most a journal object may hold: a larger one is refused unread.
    public static let maxBytes: Int64 = 4 << 20
    /// The most changes one object holds: a larger batch is written as several objects.
    public static let maxChanges = 10_000
    /// How long journal objects are kept (milliseconds): seven days.
    public static let retention: Int64 = 7 * 86_400_000

    public struct Refusal: Error {
        public let why: String
        init(_ why: String) { self.why = why }
    }

    private struct Wire: Codable {
        var format: String
        var device: String
        var deviceName: String?
        var whole: Bool?
        var changes: [Change]
    }

    private struct Change: Codable {
        var op: String
        var path: String
        var from: String?
        var id: String?
        var version: String?
        var previous: String?
    }

    public static func encode(_ batch: JournalBatch, keys: S3Keys) -> [UInt8] {
        func rel(_ p: StorePath) -> String {
            // A path with no key was never written (the write failed before): named as its bytes.
            ((try? keys.key(p)) ?? keys.keyPrefix + String(decoding: p.bytes, as: UTF8.self)).dropFirst(keys.keyPrefix.count).description
        }
        let wire = Wire(format: format, device: batch.device, deviceName: batch.deviceName, whole: batch.whole ? true : nil,
                        changes: batch.changes.map {
                            Change(op: $0.op.rawValue, path: rel($0.path), from: $0.from.map(rel), id: $0.id, version: $0.version, previous: $0.previous)
                        })
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? e.encode(wire)) ?? Data())
    }

    /// A journal object's batch; a sentence for anything that is not one this version writes
    /// (another format, a path no key of the store gives, a field out of bounds).
    public static func decode(_ body: [UInt8], keys: S3Keys) throws(Refusal) -> JournalBatch {
        guard body.count <= maxBytes else { throw Refusal("it is \(body.count) bytes, more than a journal object holds") }
        let wire: Wire
        do { wire = try JSONDecoder().decode(Wire.self, from: Data(body)) } catch { throw Refusal("it is not a journal object (\(error))") }
        guard wire.format == format else { throw Refusal("its format is \"\(wire.format.prefix(40))\", not \"\(format)\"") }
        guard wire.changes.count <= maxChanges else { throw Refusal("it names \(wire.changes.count) changes, more than \(maxChanges)") }
        guard (1...200).contains(wire.device.utf8.count), !wire.device.contains("/") else { throw Refusal("its device id is not one") }
        func path(_ s: String) throws(Refusal) -> StorePath {
            guard let (p, _) = keys.path(ofKey: keys.keyPrefix + s), !p.bytes.isEmpty else { throw Refusal("\"\(s.prefix(80))\" is no path of the store") }
            return p
        }
        func short(_ s: String?, _ what: String) throws(Refusal) -> String? {
            guard let s else { return nil }
            guard s.utf8.count <= 256 else { throw Refusal("a change's \(what) is longer than 256 bytes") }
            return s
        }
        var changes = [JournalChange]()
        changes.reserveCapacity(wire.changes.count)
        for c in wire.changes {
            guard let op = JournalChange.Op(rawValue: c.op) else { throw Refusal("\"\(c.op.prefix(20))\" is no operation") }
            guard (op == .move) == (c.from != nil) else { throw Refusal("a \(op.rawValue) \(op == .move ? "without" : "with") a source") }
            changes.append(JournalChange(op, try path(c.path), from: try c.from.map { (s) throws(Refusal) in try path(s) },
                                         id: try short(c.id, "id"), version: try short(c.version, "version"),
                                         previous: try short(c.previous, "previous version")))
        }
        return JournalBatch(device: wire.device, deviceName: try short(wire.deviceName, "device name"), changes: changes, whole: wire.whole ?? false)
    }
}
