// S3Credentials: where an S3 remote's keys come from (the store's credentials file, the
// environment, or an AWS profile), and the rule that they never appear in any text we write.
import Foundation
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

extension SigV4.Credentials {
    /// The keys for an S3 remote, looked for in this order:
    ///  1. `credentialsFile` from the store's config: an AWS-style INI file (`[default]` or the
    ///     section `AWS_PROFILE` names, with `aws_access_key_id`, `aws_secret_access_key`,
    ///     `aws_session_token`), refused unless only its owner may read it (mode 0600 or 0400);
    ///  2. `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`;
    ///  3. `~/.aws/credentials` (or `AWS_SHARED_CREDENTIALS_FILE`), section `AWS_PROFILE` or
    ///     `default`.
    /// Errors name the file and the variable, never a key.
    public static func load(credentialsFile: String?, environment: [String: String] = Tunables.processEnvironment,
                            home: String = NSHomeDirectory()) throws(RemoteError) -> SigV4.Credentials {
        let profile = environment["AWS_PROFILE"].flatMap { $0.isEmpty ? nil : $0 } ?? "default"
        if let file = credentialsFile {
            var st = stat()
            guard stat(file, &st) == 0 else {
                throw RemoteError(.invalidConfig, "The S3 credentials file \(file) cannot be read: \(Errno(rawValue: errno).readableDescription).")
            }
            guard st.st_mode & 0o077 == 0 else {
                throw RemoteError(.invalidConfig, "The S3 credentials file \(file) may be read by others (mode \(String(st.st_mode & 0o777, radix: 8))); run `chmod 600 \(file)` first.")
            }
            return try fromINI(file, profile: profile)
        }
        if let id = environment["AWS_ACCESS_KEY_ID"], !id.isEmpty {
            guard let secret = environment["AWS_SECRET_ACCESS_KEY"], !secret.isEmpty else {
                throw RemoteError(.invalidConfig, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not; set both (or neither, to use ~/.aws/credentials).")
            }
            let token = environment["AWS_SESSION_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
            return SigV4.Credentials(accessKeyID: id, secretAccessKey: secret, sessionToken: token)
        }
        let shared = environment["AWS_SHARED_CREDENTIALS_FILE"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.aws/credentials"
        if FileManager.default.fileExists(atPath: shared) {
            return try fromINI(shared, profile: profile)
        }
        throw RemoteError(.invalidConfig, "No S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with \(shared), or name a credentials file (mode 0600) in the store's config.")
    }

    /// Reads one section of an AWS-style credentials file.
    static func fromINI(_ file: String, profile: String) throws(RemoteError) -> SigV4.Credentials {
        guard let data = FileManager.default.contents(atPath: file), let text = String(data: data, encoding: .utf8) else {
            throw RemoteError(.invalidConfig, "The S3 credentials file \(file) cannot be read.")
        }
        var section: String?
        var values = [String: String]()
        var found = false
        for raw in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r" }) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                var name = line.dropFirst().dropLast().trimmingCharacters(in: .whitespaces)
                if name.hasPrefix("profile ") { name = String(name.dropFirst("profile ".count)).trimmingCharacters(in: .whitespaces) }
                section = name
                if name == profile { found = true }
                continue
            }
            guard section == profile, let eq = line.firstIndex(of: "=") else { continue }
            let key = line[..<eq].trimmingCharacters(in: .whitespaces).lowercased()
            values[key] = line[line.index(after: eq)...].trimmingCharacters(in: .whitespaces)
        }
        guard found else {
            throw RemoteError(.invalidConfig, "The S3 credentials file \(file) has no profile [\(profile)].")
        }
        guard let id = values["aws_access_key_id"], !id.isEmpty, let secret = values["aws_secret_access_key"], !secret.isEmpty else {
            throw RemoteError(.invalidConfig, "The profile [\(profile)] of \(file) lacks aws_access_key_id or aws_secret_access_key.")
        }
        return SigV4.Credentials(accessKeyID: id, secretAccessKey: secret, sessionToken: values["aws_session_token"].flatMap { $0.isEmpty ? nil : $0 })
    }
}

/// Keys never print: a credentials value that reaches a log, an error or `dump` shows only
/// that it is there.
extension SigV4.Credentials: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String { "S3 credentials (hidden)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}
