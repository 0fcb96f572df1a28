-- Sort keys and NOT_EQUALS look up one record's entry for one field: key the per-record index
-- by field too, so that lookup is a point probe instead of a scan over the record's entries.
DROP INDEX index_entries_record;
CREATE INDEX index_entries_record ON index_entries (container_id, zone_id, record_name, field);
