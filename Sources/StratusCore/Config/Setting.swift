/// Resolves a setting the way every Stratus flag does: the command-line flag wins, then the
/// environment variable, then the default.
public enum Setting {
    /// - Parameters:
    ///   - flag: the flag's value, if it was given.
    ///   - variable: the environment variable's name, e.g. `STRATUS_PORT`.
    ///   - environment: the process environment.
    ///   - fallback: the default.
    /// - Returns: the value in force. An empty environment variable counts as unset.
    public static func resolve(flag: String?, variable: String, environment: [String: String], default fallback: String?) -> String? {
        if let flag { return flag }
        if let value = environment[variable], !value.isEmpty { return value }
        return fallback
    }
}
