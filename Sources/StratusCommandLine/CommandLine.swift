import Foundation
import StratusCore

/// Reads an environment variable through the one resolution rule (flag > env > default).
public func setting(_ flag: String?, _ variable: String, default fallback: String? = nil) -> String? {
    Setting.resolve(flag: flag, variable: variable, environment: ProcessInfo.processInfo.environment, default: fallback)
}

/// A command's failure, printed as one line on standard error.
public struct CLIError: Error, CustomStringConvertible {
    public var description: String
    public init(_ message: String) { description = message }
}

/// The admin token kept in `<dataDir>/admin-token` for local use, created when asked.
public func localAdminToken(dataDir: String, create: Bool) throws -> String? {
    let path = dataDir + "/admin-token"
    if let existing = try? String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines), !existing.isEmpty {
        return existing
    }
    guard create else { return nil }
    try FileManager.default.createDirectory(atPath: dataDir, withIntermediateDirectories: true)
    var generator = SystemRandomNumberGenerator()
    let token = "adm_" + (0..<24).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    guard FileManager.default.createFile(atPath: path, contents: Data(token.utf8), attributes: [.posixPermissions: 0o600]) else {
        throw CLIError("cannot write the admin token to \(path); check the folder's permissions or set STRATUS_ADMIN_TOKEN")
    }
    return token
}
