// InitCommand: `docdrive init`: create a drive (empty, or the embedded default).
import ArgumentParser
import DocDriveCore

struct Init: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Create a new drive in the drive home.")

    @OptionGroup var drive: DriveOptions

    @Flag(help: "Create the default drive: a public app \"Notes\" and a folder store \"Archive\".")
    var `default` = false

    @Flag(help: "Succeed quietly if a drive already exists.")
    var ifMissing = false

    @Option(help: "The name other devices see this one by (default: the host name).")
    var deviceName: String?

    func run() throws {
        try guarded {
            let home = drive.driveHome
            if ifMissing && home.isInitialized {
                _ = try home.loadConfig()  // still report a broken config
                return
            }
            if let deviceName { _ = try DeviceIdentity.checkedName(deviceName) }  // before anything is made
            let config = self.default ? home.defaultConfig() : DriveConfig()
            try home.initialize(with: config)
            if let deviceName { _ = try home.renameDevice(deviceName) }
            if self.default { try home.seedDefaultContent(config) }
            print("Created a drive at \(home.path) (config: \(home.configPath)).")
        }
    }
}
