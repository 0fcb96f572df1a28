-- Change positions that a Citus coordinator can draw (Deploy/citus/distribute.sql).
--
-- Writes take their change sequence from stratus_change_seq() instead of nextval('change_seq').
-- Here it is nextval itself (a one-line SQL function: the planner inlines it, so a row costs
-- what it cost before). On Citus, distribute.sql redefines it STABLE: a coordinator evaluates a
-- stable function once per statement (and refuses volatile ones in an UPDATE of a distributed
-- table), so a statement that stamps several rows adds each row's ordinal to it. For those
-- values to stay unique, each nextval now reserves a block of 65,536: a row's sequence is the
-- block's first value plus its ordinal in the statement (statements stamp far fewer rows). Only
-- uniqueness and order within a transaction matter: feeds order by (transaction id, sequence).
ALTER SEQUENCE change_seq INCREMENT BY 65536;
CREATE FUNCTION stratus_change_seq() RETURNS bigint LANGUAGE sql VOLATILE AS $$ SELECT nextval('change_seq') $$;
