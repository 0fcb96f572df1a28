import Foundation
import Logging
import PostgresNIO
import StratusCore

/// A container-environment's limits and which of them the operator set.
public struct QuotaSettings: Sendable, Equatable {
    public var limits: QuotaLimits
    /// The wire names of the limits set explicitly (the others are defaults).
    public var set: Set<String>
}

extension MeteringStore {
    static let quotaColumns = ["max_records", "max_storage_bytes", "requests_per_second", "user_requests_per_second", "user_private_storage_bytes",
                               "notifications_per_second", "pushes_per_second", "signups_per_address_per_hour", "signups_per_hour", "log_requests"]

    /// The limits of a container-environment.
    public func quotaSettings(containerID: ContainerID, environment: ContainerEnvironment) async throws -> QuotaSettings {
        try await database.withConnection { connection in try await self.quotaSettings(containerID: containerID, environment: environment, on: connection) }
    }

    func quotaSettings(containerID: ContainerID, environment: ContainerEnvironment, on connection: PostgresConnection) async throws -> QuotaSettings {
        let rows = try await connection.rows("""
            SELECT max_records, max_storage_bytes, requests_per_second::int8, user_requests_per_second::int8, user_private_storage_bytes,
                   notifications_per_second::int8, pushes_per_second, signups_per_address_per_hour, signups_per_hour, log_requests
            FROM quota_limits WHERE container_id = \(containerID) AND environment = \(environment.code)
            """, logger: logger)
        var settings = QuotaSettings(limits: .defaults, set: [])
        guard let row = rows.first else { return settings }
        var reader = RowReader(row)
        for key in QuotaLimits.keys {
            if let value = try reader.next(Int64?.self) {
                settings.limits[keyPath: key.path] = value
                settings.set.insert(key.name)
            }
        }
        return settings
    }

    /// Sets (a number) or resets (nil: back to the default) limits of a container-environment, in
    /// one audited transaction. Returns the limits after the change.
    public func setQuotaLimits(containerID: ContainerID, environment: ContainerEnvironment, changes: [String: Int64?],
                               by actor: AuditActor) async throws -> QuotaSettings {
        try await database.transaction { connection in
            try await connection.statement("""
                INSERT INTO quota_limits (container_id, environment) VALUES (\(containerID), \(environment.code)) ON CONFLICT DO NOTHING
                """, logger: logger)
            var values: [Int64] = []
            var clear: [Bool] = []
            var given: [Bool] = []
            for key in QuotaLimits.keys {
                let change = changes[key.name]
                given.append(change != nil)
                clear.append(change.map { $0 == nil } ?? false)
                values.append((change ?? nil) ?? 0)
            }
            // Column i takes values[i] when given (NULL when cleared), else keeps its value.
            var assignments: [String] = []
            for (index, column) in Self.quotaColumns.enumerated() {
                let cast = column.hasSuffix("per_second") ? "::int4" : ""
                assignments.append("\(column) = CASE WHEN ($3::bool[])[\(index + 1)] THEN CASE WHEN ($4::bool[])[\(index + 1)] THEN NULL ELSE ($5::int8[])[\(index + 1)]\(cast) END ELSE \(column) END")
            }
            var bindings = PostgresBindings()
            bindings.append(containerID)
            bindings.append(environment.code)
            bindings.append(given)
            bindings.append(clear)
            bindings.append(values)
            try await connection.statement(PostgresQuery(unsafeSQL: """
                UPDATE quota_limits SET \(assignments.joined(separator: ", ")), updated_at = now()
                WHERE container_id = $1 AND environment = $2
                """, binds: bindings), logger: logger)
            // Every counter stripe's share of the old limits is void: the next growth in each
            // takes the locked path and divides what the new limits leave free. No stripe keeps
            // room: a cap of 0 would leave one whose count went below zero (deletes counted in
            // another stripe than their records' creates) room for that many records.
            try await connection.statement("""
                UPDATE usage_counters SET records_cap = least(records, 0), bytes_cap = least(bytes, 0)
                WHERE container_id = \(containerID) AND environment = \(environment.code)
                """, logger: logger)
            try await Invalidations.publish(.quota(containerID: containerID, environment: environment), on: connection, logger: logger)
            let detail = changes.keys.sorted().map { "\($0)=\((changes[$0] ?? nil).map(String.init) ?? "default")" }.joined(separator: " ")
            try await AuditEntry(containerID: containerID, actor: actor, action: "quota.set", environment: environment,
                                 detail: detail).write(on: connection, logger: logger)
            return try await self.quotaSettings(containerID: containerID, environment: environment, on: connection)
        }
    }
}
