-- records_by_type (container, zone, type, record_name in the database's collation) is
-- records_by_type_c but for its collation. Queries order names under COLLATE "C" and use
-- records_by_type_c; index builds were kept on it (0016), but PostgreSQL plans their walk through
-- the primary key, whose names are in the same database order, with or without it. Every create
-- paid for one more B-tree insert: with it not maintained, creates measured 8 of 8 interleaved
-- pairs cheaper for PostgreSQL (16 clients, commits not flushed; median about a tenth).
DROP INDEX records_by_type;
