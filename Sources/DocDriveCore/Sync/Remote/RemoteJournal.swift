// RemoteJournal: what a device tells the others it changed on a remote (one batch of writes), and
// where a reader of a remote's journal stands (docs/dev/remote-formats.md, "The change journal").

/// One write a device made on a remote, as its journal names it: the decision of each reader
/// still looks at the remote before it changes anything (an entry says where to look, never
/// what to do).
public struct JournalChange: Sendable, Equatable {
    public enum Op: String, Sendable, Codable {
        /// A file, folder or link written (made, replaced, given another id).
        case put
        /// An item deleted.
        case delete
        /// An item moved from `from` to `path`.
        case move
    }

    public var op: Op
    public var path: StorePath
    /// Where a move came from.
    public var from: StorePath?
    /// The item id it carries now (put, move), when known.
    public var id: String?
    /// Its version on the remote after the write (ETag), when known: a write that failed may
    /// still have landed, and is named without one.
    public var version: String?
    /// The version it replaced or deleted, when known.
    public var previous: String?

    public init(_ op: Op, _ path: StorePath, from: StorePath? = nil, id: String? = nil, version: String? = nil, previous: String? = nil) {
        (self.op, self.path, self.from, self.id, self.version, self.previous) = (op, path, from, id, version, previous)
    }

    /// The paths a reader decides again for it: the path, and where a move came from.
    public var paths: [StorePath] { from.map { [$0, path] } ?? [path] }
}

/// One journal object: the changes one device made in one batch. `whole`: the device wrote
/// things it cannot name (writes a stop of its last run left unannounced): readers list the
/// whole store.
public struct JournalBatch: Sendable, Equatable {
    public var device: String
    public var deviceName: String?
    public var changes: [JournalChange]
    public var whole: Bool

    public init(device: String, deviceName: String? = nil, changes: [JournalChange], whole: Bool = false) {
        (self.device, self.deviceName, self.changes, self.whole) = (device, deviceName, changes, whole)
    }
}

/// What one reading of a remote's journal found after a cursor.
public struct JournalPage: Sendable {
    /// The batches of other devices, oldest first, each with its key (applied once).
    public var batches: [(key: String, batch: JournalBatch)] = []
    /// A journal object that could not be read (garbled, too large, gone before its GET): the
    /// reader lists the store whole instead, and says why.
    public var unreadable: (key: String, why: String)?
    /// The cursor after this page.
    public var cursor: JournalCursor

    public init(cursor: JournalCursor) { self.cursor = cursor }
}

/// Where a reader of a journal stands: the server time (milliseconds) up to which it has read,
/// and the keys it applied within `window` before that (a journal write still in flight, or
/// a device's batch dated by a server clock a little behind another's, lands behind the newest
/// key read: each reading lists again from `time - window` and skips what it applied).
public struct JournalCursor: Sendable, Equatable {
    /// How far back each reading looks again, in milliseconds.
    public static let window: Int64 = 120_000

    /// How far apart two devices' readings of the server's clock may be (each is the `Date` of
    /// an answer, to the second, plus the time passed since it was seen).
    public static let clockSlack: Int64 = 2_000

    public var time: Int64
    public var applied: Set<String>
    /// Objects named before this time describe writes a whole listing already showed (it began
    /// after them): passed without being read. A cursor set by a listing that began at `time`
    /// has it at `time - clockSlack`.
    public var covered: Int64

    public init(time: Int64, applied: Set<String> = [], covered: Int64 = 0) {
        (self.time, self.applied, self.covered) = (time, applied, covered)
    }

    /// The cursor of a whole listing that began at the server's `time`.
    public static func listed(at time: Int64) -> JournalCursor {
        JournalCursor(time: time, covered: time - clockSlack)
    }

    /// The oldest time a reading lists from.
    public var listFrom: Int64 { max(0, time - Self.window) }

    /// After reading `keys` (each with its time): the newest time, and the applied keys still
    /// within the window of it.
    public func advanced(by keys: [(key: String, time: Int64)]) -> JournalCursor {
        let newest = keys.map(\.time).max().map { max($0, time) } ?? time
        var next = applied.union(keys.map(\.key))
        let from = max(0, newest - Self.window)
        next = next.filter { JournalKey.time(of: $0).map { $0 >= from } ?? false }
        return JournalCursor(time: newest, applied: next, covered: covered)
    }
}

/// A journal object's name: `TIME-DEVICE-SEQ`: the server's time in milliseconds (13 digits:
/// names sort by time), the writing device's id, and its count of journal writes in this run
/// (10 digits).
public enum JournalKey {
    public static func name(time: Int64, device: String, seq: Int) -> String {
        pad(time, 13) + "-" + device + "-" + pad(Int64(seq), 10)
    }

    /// The time a name carries (nil: not a journal name).
    public static func time(of name: String) -> Int64? {
        let b = Array(name.utf8)
        guard b.count > 13 + 1 + 1 + 11, b[13] == UInt8(ascii: "-"), b[..<13].allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return b[..<13].reduce(Int64(0)) { $0 * 10 + Int64($1 - 0x30) }
    }

    /// The device id a name carries.
    public static func device(of name: String) -> String? {
        let b = Array(name.utf8)
        guard time(of: name) != nil, b.count > 14 + 11 else { return nil }
        return String(decoding: b[14..<(b.count - 11)], as: UTF8.self)
    }

    /// The first name of the time `time` (every name of that time or later sorts after it).
    public static func first(atTime time: Int64) -> String { pad(time, 13) }

    static func pad(_ n: Int64, _ width: Int) -> String {
        let s = String(max(0, n))
        return String(repeating: "0", count: max(0, width - s.count)) + s
    }
}
