-- Every tenant's rows share these tables, so PostgreSQL's default estimate for
-- `container_id = $1 AND zone_id = $2` multiplies two independent selectivities and expects
-- ~1/(containers × zones) of the table: a zone of 250 records looks like 2 or 3 rows. With that,
-- prepared (generic) plans preferred scanning a whole zone and filtering `record_name = ANY($n)`
-- over probing the primary key: a one-record lookup read 56 buffers instead of 4, and deleting a
-- record's index entries read 412 instead of 5. A zone id determines its container (and an owner
-- determines the container, environment and database of their zones); functional-dependency
-- statistics tell the planner so.
CREATE STATISTICS records_zone_dependencies (dependencies) ON container_id, zone_id FROM records;
CREATE STATISTICS index_entries_zone_dependencies (dependencies) ON container_id, zone_id FROM index_entries;
CREATE STATISTICS record_references_zone_dependencies (dependencies) ON container_id, zone_id FROM record_references;
CREATE STATISTICS zones_owner_dependencies (dependencies) ON container_id, environment, database_scope, owner FROM zones;
ANALYZE records, index_entries, record_references, zones;
