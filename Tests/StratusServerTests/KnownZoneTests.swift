import Foundation
import PostgresNIO
import StratusCore
@testable import StratusServer
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// A create in a custom zone written before skips reading the zone (`RecordStore.knownZones`):
/// the write checks that the remembered id is still a live zone of that name and owner. A stale
/// id writes nothing and the request is answered as it would be without the shortcut.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct KnownZoneTests {
    @Test func aCreateInAKnownZoneIsCheckedByTheWriteItself() async throws {
        try await Harness.run { harness in
            let alice = try await harness.container().signedUp()
            let bob = try await alice.signedUp()
            let user = try #require(alice.userRecordName)
            let bobUser = try #require(bob.userRecordName)
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Notes"]]]]]).status == 200)
            func zoneID(owner: String) async throws -> ZoneID {
                try await harness.database.withConnection { connection in
                    let rows = try await connection.statement("""
                        SELECT z.zone_id FROM zones z JOIN containers c USING (container_id)
                        WHERE c.name = \(alice.container) AND z.owner = \(owner) AND z.zone_name = 'Notes'
                        """, logger: TestCluster.logger)
                    return try rows[0].decode(ZoneID.self)
                }
            }
            let id = try await zoneID(owner: user)

            // The first create reads the zone and remembers it; the next ones skip the read.
            #expect(try await alice.modify("private", zone: "Notes", [op("create", "n1")]).json.record(0)?["recordChangeTag"]?.stringValue != nil)
            let containerID = try await harness.database.withConnection { connection in
                try await connection.statement("SELECT container_id FROM containers WHERE name = \(alice.container)", logger: TestCluster.logger)[0].decode(ContainerID.self)
            }
            let db = DatabaseRef(containerID: containerID, environment: .development, scope: .private, owner: UserID(user))
            #expect(harness.app.records.knownZones.zoneID(db, "Notes") == id)
            let second = try await alice.modify("private", zone: "Notes", [op("create", "n2", fields: ["title": ["value": "two"]])])
            #expect(second.json.record(0)?["fields"]?["title"]?["value"] == "two", "\(second.json)")
            // A record that exists: unwritten by the shortcut (which forgets the zone), refused by
            // the transaction. The next create reads the zone and remembers it again.
            let again = try await alice.modify("private", zone: "Notes", [op("create", "n2")])
            #expect(again.json.record(0)?.errorCode == "EXISTS", "\(again.json)")
            #expect(harness.app.records.knownZones.zoneID(db, "Notes") == nil)
            #expect(try await alice.modify("private", zone: "Notes", [op("create", "n2b")]).json.record(0)?["recordName"] == "n2b")
            #expect(harness.app.records.knownZones.zoneID(db, "Notes") == id)
            let found = try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "Notes"], "records": [["recordName": "n1"], ["recordName": "n2"]]])
            #expect(found.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["n1", "n2"], "\(found.json)")

            // The remembered id now names another user's zone (as a zone id reused by an import
            // could): Alice's create must not land there.
            try await harness.database.withConnection { connection in
                try await connection.statement("UPDATE zones SET owner = \(bobUser) WHERE container_id = \(containerID) AND zone_id = \(id)", logger: TestCluster.logger)
            }
            let stale = try await alice.modify("private", zone: "Notes", [op("create", "n3")])
            #expect((stale.json.errorCode ?? stale.json.record(0)?.errorCode) == "ZONE_NOT_FOUND", "\(stale.json)")
            let landed = try await harness.database.withConnection { connection in
                try await connection.statement("SELECT count(*) FROM records WHERE container_id = \(containerID) AND record_name = 'n3'",
                                               logger: TestCluster.logger)[0].decode(Int64.self)
            }
            #expect(landed == 0)
            #expect(harness.app.records.knownZones.zoneID(db, "Notes") == nil)
            // Bob, whose zone it now is, sees only what was written to it.
            let bobs = try await bob.post("private", "records/lookup", ["zoneID": ["zoneName": "Notes"], "records": [["recordName": "n3"]]])
            #expect(bobs.json.record(0)?.errorCode == "NOT_FOUND", "\(bobs.json)")

            // A deleted zone: the create is refused, as without the shortcut.
            try await harness.database.withConnection { connection in
                try await connection.statement("UPDATE zones SET owner = \(user) WHERE container_id = \(containerID) AND zone_id = \(id)", logger: TestCluster.logger)
            }
            #expect(try await alice.modify("private", zone: "Notes", [op("create", "n4")]).json.record(0)?["recordName"] == "n4")
            #expect(harness.app.records.knownZones.zoneID(db, "Notes") == id)
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "Notes"]]]]]).status == 200)
            let deleted = try await alice.modify("private", zone: "Notes", [op("create", "n5")])
            #expect((deleted.json.errorCode ?? deleted.json.record(0)?.errorCode) == "ZONE_NOT_FOUND", "\(deleted.json)")
        }
    }
}
