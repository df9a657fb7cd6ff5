// DeviceCommand: `docdrive device [--name NAME] [--json]`: which device this drive is to the
// others sharing its stores (the name shows in their conflict copies and status).
import ArgumentParser
import DocDriveCore
import Foundation

struct Device: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show this drive's device id and name, or rename it (the name other devices see in conflict copies).")

    @OptionGroup var drive: DriveOptions
    @Option(help: "A new name for this device.") var name: String?
    @Flag(help: "Print JSON.") var json = false

    func run() throws {
        try guarded {
            let home = drive.driveHome
            _ = try home.loadConfig(checkingRemotes: false)
            let d = try name.map { n throws(DriveError) in try home.renameDevice(n) } ?? home.device()
            if json { printJSON(["id": d.id, "name": d.name]); return }
            print("This device is \"\(d.name)\" (id \(d.id)).")
        }
    }
}
