-- Every record write in a private or shared database moves its zone's change position
-- (change_xid, change_seq), so an active zone's row is updated as often as its records are
-- written. zones_changes indexed that position, so no such update could be HOT: each one added an
-- entry to all three of the table's indexes, and on a database that had served a few million
-- creates the index held 45 MB for 500 zones. Measured on that database (16 clients, commits not
-- flushed, 3 runs each), creates went from 2,270–2,698/s at 308–369 µs of PostgreSQL CPU each to
-- 2,595–2,999/s at 267–336 µs without it.
--
-- The database change feed (changes/database) now finds an owner's zones through the
-- (container, environment, scope, owner, zone_name) key and orders them itself: work that grows
-- with the owner's zones, 2.6–3.9 ms a page for an owner with 10,000 zones, and nothing to notice
-- for the few zones most users have. The free half of each page leaves room for the new versions
-- of its zones' rows.
DROP INDEX zones_changes;
ALTER TABLE zones SET (fillfactor = 50);
