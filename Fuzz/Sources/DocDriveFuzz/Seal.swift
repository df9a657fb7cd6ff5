// Sealing any bytes as a token's payload, with a MAC the drive's key makes: SignedToken.seal
// takes an Encodable, and the targets want the payload's bytes as the fuzzer made them.
@testable import DocDriveCore
import Crypto
import Foundation

enum SealForFuzz {
    static func seal(_ body: [UInt8], purpose: TokenPurpose, key: DriveKey) -> String {
        var signed = Data(purpose.rawValue.utf8)
        signed.append(0)
        signed.append(contentsOf: body)
        let mac = HMAC<SHA256>.authenticationCode(for: signed, using: key.key)
        return SignedToken.base64url(Data(body)) + "." + SignedToken.base64url(Data(mac))
    }
}

enum SHA256Hash {
    static func of(_ bytes: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: bytes)) }
}
