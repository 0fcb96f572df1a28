-- Queries page through a zone's records of a type in record-name order under COLLATE "C" (the same
-- order on every server, whatever the database's locale). PostgreSQL takes an index's order only
-- for an ORDER BY of the same collation, and records_by_type's record_name has the database's
-- default one: a query with no filter and no sort read and sorted every record of its type in the
-- zone (16 ms at 14,200 records, 85 ms at 62,500) to return a page of 50. This index gives the
-- page directly (0.1 ms). records_by_type stays: index builds walk a type's records in the
-- database's order, and delete index entries by name ranges in that same order.
CREATE INDEX records_by_type_c ON records (container_id, zone_id, record_type, record_name COLLATE "C") WHERE NOT deleted;
