// ExitCodes: every exit status `docdrive` uses, in one place.
import DocDriveCore

enum ExitCodes {
    static let failure: Int32 = 1
    static let usage: Int32 = 64
    static let notInitialized: Int32 = 3
    static let invalidConfig: Int32 = 4
    static let busy: Int32 = 5
    static let notMounted: Int32 = 6
    static let alreadyMounted: Int32 = 7

    static let summary = "0 ok, 1 failure, 3 no drive, 4 bad config or name, 5 busy, 6 not mounted, 7 already mounted, 64 usage."

    static func code(for c: DriveError.Code) -> Int32 {
        switch c {
        case .notInitialized: return notInitialized
        case .invalidConfig, .invalidName: return invalidConfig
        case .busy: return busy
        case .notMounted: return notMounted
        case .alreadyMounted: return alreadyMounted
        default: return failure
        }
    }
}
