// RemoteError: the one error type of the remote layer (Sync/Remote): what a store's remote
// answered, or why it could not be asked. The sync engine turns it into its own error where it
// calls a remote (SyncError.init(_:)); nothing above the sync engine sees it.
import SystemPackage

/// A remote's failure: one sentence, a code the sync engine decides on, and the cause underneath.
public struct RemoteError: Error, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Raw: String, Sendable {
            case changed, notFound, unreachable, unsupported, invalidName, invalidConfig, sourceChanged, io
        }
        private let raw: Raw
        private init(_ raw: Raw) { self.raw = raw }
        public var description: String { raw.rawValue }

        /// A conditional write, move or delete found another version than the one it expected
        /// (another device wrote it): nothing was changed; decide again.
        public static let changed = Code(.changed)
        /// Nothing is at the path (or the version asked for is gone).
        public static let notFound = Code(.notFound)
        /// The remote is down, full, read-only, refuses the credentials or is not the store's:
        /// retry later, and never read it as empty.
        public static let unreachable = Code(.unreachable)
        /// The remote cannot do what was asked (an S3 server without the call, an object too
        /// large to copy onto itself).
        public static let unsupported = Code(.unsupported)
        /// A path or id the remote cannot hold (too long a key, a name DocDrive reserves).
        public static let invalidName = Code(.invalidName)
        /// The store's settings or credentials cannot be used as written.
        public static let invalidConfig = Code(.invalidConfig)
        /// The local file being uploaded changed while it was read: upload it again.
        public static let sourceChanged = Code(.sourceChanged)
        /// Anything else: an unexpected answer, or a local read or write that failed (the errno
        /// is the underlying cause).
        public static let io = Code(.io)
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

    /// A system call failed: "cannot write the picture of x: No space left on device."
    public static func io(_ what: String, _ errno: Errno) -> RemoteError {
        RemoteError(.io, "\(what): \(errno.readableDescription).", underlying: errno)
    }
}
