import Foundation
import PostgresNIO
import StratusCore
@testable import StratusServer
import StratusStore
@testable import StratusTestSupport
import Testing

/// "Saved" only after PostgreSQL has committed: writes whose commit fails, or whose backend is
/// terminated in the middle of the commit, are never answered as saved, and the database holds
/// exactly what the answer says.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct DurabilityTests {
    /// The record writes a client makes most: a create in the default zone and in a custom zone
    /// (one alone, then one that shares a statement with creates arriving with it), a change of a
    /// record, and an atomic two-record create. With the commit failing, each is answered
    /// TRY_AGAIN_LATER (never 200, never 500) and nothing of it is in the database.
    @Test(arguments: [CommitFaults.Mode.fail, .stall])
    func recordWritesAreNotAnsweredSavedWhenTheCommitFails(mode: CommitFaults.Mode) async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            #expect(try await session.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Work"]]]]]).status == 200)
            // A create in the zone first, so that later creates know its id and share statements.
            #expect(try await session.modify("private", zone: "Work", [op("create", "known")]).json.record(0)?["recordChangeTag"] != nil)
            let existing = try await session.modify("private", [op("create", "existing", fields: ["n": ["value": 1]])])
            let tag = try #require(existing.json.record(0)?["recordChangeTag"]?.stringValue)
            // The faults' statements on a pool of their own: the app's loses connections on purpose.
            try await withDatabase(harness.database.configuration, maximumConnections: 1) { own in
            let faults = try await CommitFaults.install(on: own, tables: ["records"])

            let writes: [(String, @Sendable () async throws -> (status: Int, json: JSON))] = [
                ("create in the default zone", { try await session.modify("private", [op("create", "lost-default")]) }),
                ("create in a custom zone", { try await session.modify("private", zone: "Work", [op("create", "lost-custom")]) }),
                ("change of a record", { try await session.modify("private", [op("update", "existing", tag: tag, fields: ["n": ["value": 2]])]) }),
                ("atomic create of two records", {
                    try await session.modify("private", zone: "Work", atomic: true, [op("create", "lost-atomic-1"), op("create", "lost-atomic-2")])
                }),
            ]
            for (name, write) in writes {
                try await faults.arm(mode)
                let answer: (status: Int, json: JSON)
                if mode == .stall {
                    let sent = Task { try await write() }
                    #expect(try await faults.terminateStalled() >= 1, "\(name): no commit stalled")
                    answer = try await sent.value
                } else {
                    answer = try await write()
                }
                try await faults.disarm()
                #expect(answer.status == 503 && answer.json.errorCode == "TRY_AGAIN_LATER", "\(name) (\(mode)): \(answer.status) \(answer.json.errorCode ?? "") \(answer.json["reason"]?.stringValue ?? "")")
            }
            // Several creates in one shared statement: each is answered, none as saved.
            try await faults.arm(mode)
            let shared = (0..<6).map { index in Task { try await session.modify("private", zone: "Work", [op("create", "lost-shared-\(index)")]) } }
            if mode == .stall {
                // Each statement that carries some of them stalls in turn: terminate each.
                #expect(try await faults.terminateStalled() >= 1, "shared creates: no commit stalled")
                let terminator = Task {
                    while !Task.isCancelled {
                        try await faults.terminateStalled(wait: false)
                        try await Task.sleep(for: .milliseconds(50))
                    }
                }
                for task in shared { _ = try? await task.value }
                terminator.cancel()
            }
            for (index, task) in shared.enumerated() {
                let answer = try await task.value
                #expect(answer.status == 503 && answer.json.errorCode == "TRY_AGAIN_LATER", "shared create \(index) (\(mode)): \(answer.status) \(answer.json.errorCode ?? "") \(answer.json["reason"]?.stringValue ?? "")")
            }
            try await faults.disarm()

            let names = ["lost-default", "lost-atomic-1", "lost-atomic-2"]
            let lookup = try await session.post("private", "records/lookup", ["records": .array(names.map { ["recordName": .string($0)] })])
            for index in names.indices {
                #expect(lookup.json.record(index)?.errorCode == "NOT_FOUND", "\(names[index]) is in the database")
            }
            let custom = ["lost-custom"] + (0..<6).map { "lost-shared-\($0)" }
            let inZone = try await session.post("private", "records/lookup", ["zoneID": ["zoneName": "Work"], "records": .array(custom.map { ["recordName": .string($0)] })])
            for index in custom.indices {
                #expect(inZone.json.record(index)?.errorCode == "NOT_FOUND", "\(custom[index]) is in the database")
            }
            let unchanged = try await session.post("private", "records/lookup", ["records": [["recordName": "existing"]]])
            #expect(unchanged.json.record(0)?["fields"]?["n"]?["value"] == 1, "the change was saved: \(unchanged.json)")
            #expect(unchanged.json.record(0)?["recordChangeTag"]?.stringValue == tag)

            // Disarmed, the same writes are saved.
            // A client that was told "unknown" retries; a create that did commit is answered EXISTS
            // with the stored record, so the client can tell its own save from somebody else's.
            for zone in [nil, "Work"] as [String?] {
                let first = try await session.modify("private", zone: zone, [op("create", "retried", fields: ["n": ["value": 7]])])
                #expect(first.json.record(0)?["recordChangeTag"] != nil, "\(first.json)")
                let again = try await session.modify("private", zone: zone, [op("create", "retried", fields: ["n": ["value": 7]])])
                let answer = again.json.record(0)
                #expect(answer?.errorCode == "EXISTS" && answer?["serverRecord"]?["fields"]?["n"]?["value"] == 7
                        && answer?["serverRecord"]?["recordChangeTag"] == first.json.record(0)?["recordChangeTag"], "\(zone ?? "default zone"): \(again.json)")
            }
            #expect(try await session.modify("private", [op("create", "lost-default")]).json.record(0)?["recordChangeTag"] != nil)
            #expect(try await session.modify("private", zone: "Work", [op("create", "lost-custom")]).json.record(0)?["recordChangeTag"] != nil)
            }
        }
    }
}
