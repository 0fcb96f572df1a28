import Foundation
import Logging
import StratusCommandLine
import StratusCore

/// Writes log lines to standard error in `StreamLogHandler`'s format, but renders metadata only
/// when a line is written.
///
/// `StreamLogHandler` re-renders (sorts and joins) its whole metadata dictionary every time a
/// key is set. Hummingbird sets a request id on every request, and PostgresNIO a connection id
/// on every query, so at the default `info` level the server paid that cost on each request
/// (visible in a lookup's profile) for lines it never wrote.
///
/// With `json` (`--log-format json`), each line is one JSON object instead: `time` (ISO 8601, UTC),
/// `level`, `label`, `source`, `message`, and the metadata's keys at the top level (a request's
/// lines carry `stratus.request_id`), for log shippers that parse lines.
struct StderrLogHandler: LogHandler {
    private let label: String
    private let json: Bool
    var logLevel: Logger.Level = .info
    var metadata = Logger.Metadata()
    var metadataProvider: Logger.MetadataProvider?

    init(label: String, json: Bool = false) {
        self.label = label
        self.json = json
        self.metadataProvider = LoggingSystem.metadataProvider
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let explicit = event.metadata { merged.merge(explicit) { _, new in new } }
        if let error = event.error {
            merged["error.message"] = "\(error)"
            merged["error.type"] = "\(String(reflecting: type(of: error)))"
        }
        if json {
            var object: [String: JSON] = [:]
            for (key, value) in merged { object[key] = Self.json(value) }
            object["time"] = .string(Date().formatted(.iso8601))
            object["level"] = .string("\(event.level)")
            object["label"] = .string(label)
            object["source"] = .string(event.source)
            object["message"] = .string("\(event.message)")
            var bytes = JSONWriter.bytes(.object(object))
            bytes.append(UInt8(ascii: "\n"))
            bytes.withUnsafeBytes { _ = write(STDERR_FILENO, $0.baseAddress, $0.count) }
            return
        }
        var line = "\(Self.timestamp()) \(event.level)\(label.isEmpty ? "" : " ")\(label):"
        if !merged.isEmpty {
            line += " " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        }
        line += " [\(event.source)] \(event.message)\n"
        line.withUTF8 { _ = write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }

    private static func json(_ value: Logger.Metadata.Value) -> JSON {
        switch value {
        case .string(let text): .string(text)
        case .stringConvertible(let convertible): .string(convertible.description)
        case .array(let values): .array(values.map(json))
        case .dictionary(let values): .object(values.mapValues(json))
        }
    }

    private static func timestamp() -> String {
        var buffer = [CChar](repeating: 0, count: 64)
        var now = time(nil)
        var local = tm()
        guard localtime_r(&now, &local) != nil else { return "<unknown>" }
        strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &local)
        return String(cString: buffer)
    }
}
