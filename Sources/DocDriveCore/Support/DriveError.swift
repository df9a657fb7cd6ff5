// DriveError: the drive's error (set-up, the index, the sync engine, the document modes, the query, control); docs/dev/architecture.md "Errors".
import SystemPackage

/// An error a user can read: one sentence, a code scripts can test, and the cause underneath.
public struct DriveError: Error, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Raw: String, Sendable {
            case invalidConfig, invalidName, notFound, alreadyExists, notInitialized
            case alreadyMounted, notMounted, busy, io, index, mount, unsupported, invalidToken
            case unreachable, changedDuringUpload, lockedForWriting, remoteChanged
            case badRequest, protocolMismatch, notPermitted
        }
        private let raw: Raw
        private init(_ raw: Raw) { self.raw = raw }
        /// The code a name stands for (a daemon's answer names it); unknown names are `io`.
        init(named s: String) { raw = Raw(rawValue: s) ?? .io }
        public var description: String { raw.rawValue }

        public static let invalidConfig = Code(.invalidConfig)
        public static let invalidName = Code(.invalidName)
        public static let notFound = Code(.notFound)
        public static let alreadyExists = Code(.alreadyExists)
        public static let notInitialized = Code(.notInitialized)
        public static let alreadyMounted = Code(.alreadyMounted)
        public static let notMounted = Code(.notMounted)
        public static let busy = Code(.busy)
        public static let io = Code(.io)
        public static let index = Code(.index)
        public static let mount = Code(.mount)
        public static let unsupported = Code(.unsupported)
        public static let invalidToken = Code(.invalidToken)
        /// The remote is down, full, read-only or not the store's: retry later.
        public static let unreachable = Code(.unreachable)
        /// The local file changed during its upload: upload it again.
        public static let changedDuringUpload = Code(.changedDuringUpload)
        /// A process holds a write lock on the local file: upload it after the release.
        public static let lockedForWriting = Code(.lockedForWriting)
        /// A conditional write or delete found another version on the remote than the one it
        /// expected (another device wrote it): nothing was changed; decide again.
        public static let remoteChanged = Code(.remoteChanged)
        /// A control request the daemon cannot read (not JSON, an unknown command, a field missing).
        public static let badRequest = Code(.badRequest)
        /// The command and the mounted daemon speak different control protocol versions.
        public static let protocolMismatch = Code(.protocolMismatch)
        /// Someone other than the drive's owner asked its daemon.
        public static let notPermitted = Code(.notPermitted)
    }

    public let code: Code
    public let message: String
    public let underlying: (any Error)?

    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String { message }

    /// A system call failed on a path: "cannot create /x: Permission denied."
    public static func io(_ what: String, _ errno: Errno) -> DriveError {
        DriveError(.io, "\(what): \(errno.readableDescription).", underlying: errno)
    }

    /// A remote's failure where the sync engine meets it: the same sentence, under the code the
    /// sync engine decides on.
    public init(_ e: RemoteError) {
        let code: Code = switch e.code {
        case .changed: .remoteChanged
        case .notFound: .notFound
        case .unreachable: .unreachable
        case .unsupported: .unsupported
        case .invalidName: .invalidName
        case .invalidConfig: .invalidConfig
        case .sourceChanged: .changedDuringUpload
        default: .io
        }
        self.init(code, e.message, underlying: e.underlying ?? e)
    }

    /// `body`, with a remote's failure as the drive's error (`init(_:)`): where set-up or the
    /// sync engine calls a remote.
    public static func fromRemote<T>(_ body: () throws(RemoteError) -> T) throws(DriveError) -> T {
        do { return try body() } catch { throw DriveError(error) }
    }

    /// ENOSPC or EDQUOT when this device's disk (or the user's quota on it) had no room for
    /// what the error is about; nil for anything else. A file operation that failed for it
    /// answers it as it is, where any other failure of the sync is EIO.
    public var noRoomErrno: Errno? {
        guard let e = underlying as? Errno, e == .noSpace || e == .diskQuotaExceeded else { return nil }
        return e
    }
}

extension Errno {
    /// strerror's text, without swift-system's decoration.
    public var readableDescription: String {
        String(cString: strerror(rawValue))
    }
}

#if canImport(Glibc)
import Glibc
#endif
