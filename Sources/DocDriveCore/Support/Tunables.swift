// Tunables: every setting the core takes from the process environment, read once, in one place.
// Nothing else in DocDriveCore reads the environment: a part that needs one of these asks here
// (or is given an environment by its caller, as DriveHome and the S3 credentials are).
import Foundation

public struct Tunables: Sendable {
    /// DOCDRIVE_NODE_FD_BUDGET: how many backing descriptors the nodes may keep open (default:
    /// three quarters of the open-file limit). Tests use a tiny budget to exercise reopening.
    public var nodeDescriptorBudget: Int?
    /// DOCDRIVE_REMEMBERED_NODES: how many nodes the kernel forgot are remembered, so their
    /// file handles stay valid (default 262,144; 0 turns it off).
    public var rememberedNodes: Int
    /// DOCDRIVE_FILL_COMMIT_QUIET: seconds without a fill that end a burst of fills (default 1).
    public var fillCommitQuiet: Double
    /// DOCDRIVE_QUERY_INDEX=off: no query index (for measuring what it costs).
    public var queryIndexOff: Bool
    /// DOCDRIVE_NO_THUMBNAIL_CACHE=1: pictures are not written into the freedesktop cache.
    public var noThumbnailCache: Bool
    /// XDG_CACHE_HOME, else HOME/.cache: where the freedesktop thumbnail cache is.
    public var cacheHome: String?
    /// DOCDRIVE_CHECKS=1: the states' invariants are checked in a release build too
    /// (Invariants.swift); the test suite sets it.
    public var checks: Bool

    /// The settings `environment` gives; a value that does not parse is left at its default.
    public init(environment env: [String: String]) {
        nodeDescriptorBudget = env["DOCDRIVE_NODE_FD_BUDGET"].flatMap(Int.init).flatMap { $0 > 0 ? $0 : nil }
        rememberedNodes = env["DOCDRIVE_REMEMBERED_NODES"].flatMap(Int.init).flatMap { $0 >= 0 ? $0 : nil } ?? 1 << 18
        fillCommitQuiet = env["DOCDRIVE_FILL_COMMIT_QUIET"].flatMap(Double.init).flatMap { $0 >= 0 && $0.isFinite ? $0 : nil } ?? 1.0
        queryIndexOff = env["DOCDRIVE_QUERY_INDEX"] == "off"
        noThumbnailCache = env["DOCDRIVE_NO_THUMBNAIL_CACHE"] == "1"
        checks = env["DOCDRIVE_CHECKS"] == "1"
        cacheHome = env["XDG_CACHE_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? env["HOME"].map { $0 + "/.cache" }
    }

    /// The process's environment, read once at first use: the one read of it in DocDriveCore.
    public static let processEnvironment = ProcessInfo.processInfo.environment
    /// The process's settings.
    public static let process = Tunables(environment: processEnvironment)
}
