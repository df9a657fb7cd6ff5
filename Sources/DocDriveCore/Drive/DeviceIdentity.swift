// DeviceIdentity: which device a drive is (a random id made at `init`, and a name: the host name
// unless set), written with what it puts on a shared remote (DESIGN.md 9).
import Foundation
#if canImport(Glibc)
import Glibc
#endif

public struct DeviceIdentity: Codable, Equatable, Sendable {
    /// 16 random bytes in hex: two drives never share it, even with the same home path.
    public var id: String
    /// Shown to people (conflict copies, `docdrive status`): the host name unless set.
    public var name: String

    /// A short form of the id for names on a remote (temporary files carry it).
    public var tag: String { String(id.prefix(12)) }

    public static func make(name: String? = nil) -> DeviceIdentity {
        var rng = SystemRandomNumberGenerator()
        let bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }
        return DeviceIdentity(id: Hex.encode(bytes), name: clean(name) ?? hostName())
    }

    static func hostName() -> String {
        var buf = [CChar](repeating: 0, count: 256)
        guard gethostname(&buf, buf.count - 1) == 0 else { return "device" }
        let host = buf.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return clean(host) ?? "device"
    }

    /// `name` as a device name, or one sentence saying why it cannot be one.
    public static func checkedName(_ name: String) throws(DriveError) -> String {
        guard let clean = clean(name) else {
            throw DriveError(.invalidName, "\"\(name)\" cannot name a device: use printable characters and no slash.")
        }
        return clean
    }

    /// A device name fit for file names: no slash, NUL or control character, at most 64 bytes.
    static func clean(_ name: String?) -> String? {
        guard let name, !name.unicodeScalars.contains(where: { $0 == "/" || $0.value < 0x20 || $0.value == 0x7F }) else { return nil }
        var out = name.trimmingCharacters(in: .whitespaces)
        while out.utf8.count > 64 { out.removeLast() }
        return out.isEmpty ? nil : out
    }
}

extension DriveHome {
    public var devicePath: String { path + "/device.json" }

    /// The drive's device identity; made (and written) the first time for a drive from before it.
    public func device() throws(DriveError) -> DeviceIdentity {
        if let data = FileManager.default.contents(atPath: devicePath) {
            do {
                return try JSONDecoder().decode(DeviceIdentity.self, from: data)
            } catch {
                throw DriveError(.invalidConfig, "\(devicePath) is damaged (\(error.localizedDescription)); remove it to give this drive a new device id.", underlying: error)
            }
        }
        let made = DeviceIdentity.make()
        try saveDevice(made)
        return made
    }

    public func saveDevice(_ d: DeviceIdentity) throws(DriveError) {
        let enc = JSONEncoder()
        enc.outputFormatting = [.prettyPrinted, .sortedKeys]
        let text = (try? enc.encode(d)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        try Self.writeAtomically(text + "\n", to: devicePath, mode: 0o644)
    }

    /// Gives the device a name (`docdrive init --device-name`, `docdrive device --name`).
    public func renameDevice(_ name: String) throws(DriveError) -> DeviceIdentity {
        let clean = try DeviceIdentity.checkedName(name)
        var d = try device()
        d.name = clean
        try saveDevice(d)
        return d
    }
}
