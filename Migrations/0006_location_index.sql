-- Location index entries (issue 22): a LOCATION field's entries (field '~geo:<name>') carry the
-- point's Z-order cell code (v_cell) and its exact latitude and longitude (v_lat, v_lon); their
-- other value columns are NULL, so they sit in this index only. NEAR scans a few ranges of cells
-- (index-only, thanks to INCLUDE) and tests the exact distance on the included coordinates.
-- Adding nullable columns without a default rewrites nothing.
ALTER TABLE index_entries ADD COLUMN v_cell bigint, ADD COLUMN v_lat double precision, ADD COLUMN v_lon double precision;
CREATE INDEX index_entries_geo ON index_entries (container_id, zone_id, record_type, field, v_cell)
    INCLUDE (v_lat, v_lon, record_name) WHERE v_cell IS NOT NULL;
