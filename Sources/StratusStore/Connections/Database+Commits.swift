import Logging
import PostgresNIO
import StratusCore

/// Commits that do not happen as planned: refused by PostgreSQL, or cut off before they were
/// confirmed, and how the latter are settled. What confirms a commit is ``CommitWatch``.
extension Database {
    /// PostgreSQL rolled a statement outside `BEGIN … COMMIT` back at its commit (an error raised
    /// by a deferred constraint, a serialization failure): nothing of it was saved.
    struct CommitRefused: Error, CustomStringConvertible {
        let failure: CommitWatch.ServerFailure
        var description: String { "PostgreSQL refused the commit: \(failure)" }
    }

    /// The connection failed after a statement outside `BEGIN … COMMIT` ran and before its commit
    /// was confirmed (a FATAL, a restart, a cut connection): PostgreSQL may have committed it or
    /// not. Writers that know their transaction's id settle it (``settle(xid:check:)``); anything
    /// else is answered TRY_AGAIN_LATER saying the outcome is unknown.
    struct CommitUnknown: Error, CustomStringConvertible {
        let failure: CommitWatch.ServerFailure?
        var underlying: (any Error)? = nil
        var description: String {
            "the connection failed before the commit was confirmed" + (failure.map { " (\($0))" } ?? "") + (underlying.map { ": \(String(reflecting: $0))" } ?? "")
        }
    }

    /// Whether a server error ends the session (FATAL, PANIC): after one, a transaction's fate is
    /// not told by the error.
    static func endsSession(_ error: PSQLError) -> Bool {
        let severity = error.serverInfo?[.severity] ?? error.serverInfo?[.localizedSeverity]
        return severity == "FATAL" || severity == "PANIC"
    }

    /// PostgreSQL could not be asked within `settle`'s time whether a transaction committed.
    struct CommitOutcomeUnknown: Error, CustomStringConvertible {
        var underlying: (any Error)?
        var description: String { "the commit's outcome could not be learned" + (underlying.map { ": \(String(reflecting: $0))" } ?? "") }
    }

    /// Whether the transaction `xid`, whose commit was not confirmed (``CommitUnknown``), committed:
    /// asked of PostgreSQL (`pg_xact_status`) on a connection of its own, again while the
    /// transaction is still in progress or PostgreSQL cannot be reached (a restart, a crash
    /// recovery), for up to 10 seconds; then ``CommitOutcomeUnknown`` is thrown.
    ///
    /// The connection is opened for the question, not leased: the caller still holds its lease on
    /// the connection that failed, and when PostgreSQL restarts every request in flight settles at
    /// once; leasing a second connection each could leave them all waiting on the pool.
    ///
    /// Once the transaction has committed, `check` is asked on that connection whether what the
    /// caller wrote is there (rows carrying `xid`): after a crash, PostgreSQL may hand out again the
    /// ids of transactions whose records never reached the disk, so a status alone could describe
    /// somebody else's transaction.
    public func settle(xid: Int64, check: @Sendable (PostgresConnection) async throws -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        var last: (any Error)?
        while ContinuousClock.now < deadline {
            do {
                let answer: Bool? = try await Database.withSingleConnection(configuration, logger: logger) { connection -> Bool? in
                    let status: String?
                    do {
                        status = try await connection.statement("SELECT pg_xact_status(\(String(xid))::text::xid8)", logger: logger)
                            .first?.decode(String?.self)
                    } catch let error as PSQLError where error.serverInfo?[.sqlState] == "22023" {
                        // "in the future": the crash that cut the statement off lost it, and its id.
                        return false
                    }
                    switch status {
                    case "in progress": return nil
                    case "aborted": return false
                    default: return try await check(connection)
                    }
                }
                if let answer {
                    logger.notice("a commit that was not confirmed settled", metadata: ["stratus.xid": "\(xid)", "stratus.committed": "\(answer)"])
                    return answer
                }
            } catch is CancellationError {
                throw CommitOutcomeUnknown(underlying: CancellationError())
            } catch {
                last = error
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
        throw CommitOutcomeUnknown(underlying: last)
    }
}

extension PostgresConnection {
    /// Waits until PostgreSQL has committed the statement whose rows were just read, when it ran
    /// outside `BEGIN … COMMIT` (see ``CommitWatch``). Throws ``Database/CommitRefused`` when
    /// PostgreSQL rolled it back at commit, and ``Database/CommitUnknown`` when the connection
    /// failed before the commit was confirmed.
    ///
    /// `watch` is the connection's (`CommitWatch.of`), asked for before the statement was sent.
    func confirmCommitted(_ watch: CommitWatch?, logger: Logger) async throws {
        switch await watch?.outcome() ?? .unwatched {
        case .confirmed:
            return
        case .refused(let failure):
            throw Database.CommitRefused(failure: failure)
        case .unknown(let failure):
            throw Database.CommitUnknown(failure: failure)
        case .unwatched:
            // PostgresNIO sends this only after the statement's ReadyForQuery.
            do {
                try requireOpen()
                _ = try await self.query("SELECT 1", logger: logger).collect()
            } catch {
                throw Database.CommitUnknown(failure: nil, underlying: error)
            }
        }
    }
}
