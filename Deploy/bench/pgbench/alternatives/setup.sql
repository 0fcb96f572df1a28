-- Issue 22's measured alternatives, built beside the service's own index entries of the seeded
-- places (`stratus-bench seed --places N`), for the scripts in this folder. Run once after seeding:
--   psql -f Deploy/bench/pgbench/alternatives/setup.sql
-- Location: PostgreSQL's cube + earthdistance (a GiST index on ll_to_earth points, tenant columns
-- through btree_gist). Text: tsvector ('simple' configuration over unaccent) in a GIN index
-- (tenant columns through btree_gin).
CREATE EXTENSION IF NOT EXISTS cube;
CREATE EXTENSION IF NOT EXISTS earthdistance;
CREATE EXTENSION IF NOT EXISTS btree_gist;
CREATE EXTENSION IF NOT EXISTS btree_gin;
CREATE EXTENSION IF NOT EXISTS unaccent;
DROP TABLE IF EXISTS alt_geo;
CREATE TABLE alt_geo AS
  SELECT container_id, zone_id, record_type, field, record_name, v_lat, v_lon, ll_to_earth(v_lat, v_lon) AS point
    FROM index_entries WHERE v_cell IS NOT NULL;
CREATE INDEX alt_geo_point ON alt_geo USING gist (container_id, zone_id, record_type, field, point);
DROP TABLE IF EXISTS alt_text;
-- unaccent() is not IMMUTABLE, so the vector is stored, as an application would store it.
CREATE TABLE alt_text AS
  SELECT container_id, zone_id, record_type, record_name,
         to_tsvector('simple', unaccent(fields::jsonb -> 'note' ->> 'value')) AS words
    FROM records WHERE record_type = 'Place' AND NOT deleted;
CREATE INDEX alt_text_words ON alt_text USING gin (container_id, zone_id, record_type, words);
VACUUM ANALYZE alt_geo;
VACUUM ANALYZE alt_text;
