import PostgresNIO
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// Statements built at run time (queries, change feeds) are prepared under names that never
/// change meaning, up to a cap; past the cap they run unprepared, with the same answers.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct DynamicStatementTests {
    @Test func shapesBeyondTheCapRunUnpreparedWithTheSameAnswers() async throws {
        try await Harness.run { harness in
            // A registry of its own: filling the service's would leave the other suites' later
            // shapes (the change feed's, which two tests look for among a connection's prepared
            // statements) unprepared, depending on which test ran first.
            let registry = Prepared.Shapes(prefix: "stratus_test_shape_", maximum: 40)
            let shapes = registry.maximum + 44
            let (answers, prepared) = try await harness.database.withConnection { connection in
                var answers: [Int64] = []
                for shape in 0..<shapes {
                    var binds = Prepared.Binds()
                    let value = binds.bind(Int64(shape))
                    // Each text is a new shape; running it twice reuses its statement (or runs it unprepared twice).
                    for _ in 0..<2 {
                        let rows = try await Prepared.Dynamic.rows("SELECT \(value) * 2 + \(shape) AS n", binds, on: connection, logger: TestCluster.logger,
                                                                           shapes: registry)
                        answers.append(try rows[0].decode(Int64.self))
                    }
                }
                let prepared = try await connection.rows(
                    "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'stratus_test_shape_%'", logger: TestCluster.logger)
                return (answers, try prepared[0].decode(Int64.self))
            }
            let expected: [Int64] = (0..<shapes).flatMap { shape -> [Int64] in [Int64(shape * 3), Int64(shape * 3)] }
            #expect(answers == expected)
            // The first `maximum` shapes were prepared on this connection, and no more.
            #expect(prepared == Int64(registry.maximum), "\(prepared) prepared")
        }
    }
}
