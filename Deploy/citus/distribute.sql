-- Placing Stratus's tables on Citus (issue 28). Run on the coordinator, after `stratus migrate`
-- has built the schema and before any data arrives: see Deploy/citus/README.md.
--
-- Every tenant's rows carry container_id, and every request touches one container, so the
-- tables are distributed by container_id and co-located: a request's statements (joins between
-- records, zones, index_entries, …) run on the one node that holds its container.
-- CitusConstraintTests checks that every primary key, unique constraint and unique index of a
-- distributed table leads with container_id, and that each table is placed here.
CREATE EXTENSION IF NOT EXISTS citus;

-- Change positions. A write stores (transaction id, sequence); on Citus both are drawn on the
-- coordinator, which evaluates a modification's stable functions itself before the statement
-- goes to the worker, so every position comes from one counter whatever worker holds the
-- container, and moving a container to another worker changes none of them. The sequence
-- function is made STABLE here (one value per statement: Citus refuses volatile functions in an
-- UPDATE of a distributed table); each nextval reserves a block of 65,536 (migration 0018) and
-- a statement stamping several rows adds each one's ordinal. Change feeds read the coordinator's
-- snapshot (`stratus serve` sees the citus extension and does so).
CREATE OR REPLACE FUNCTION stratus_change_seq() RETURNS bigint LANGUAGE sql STABLE AS $$ SELECT nextval('change_seq') $$;

-- Change feeds and two-phase commits. Citus commits a request's transaction in two phases when
-- it wrote through more than one connection (intermediate results of a statement planned in
-- parts go to every worker) or on the coordinator too: the worker PREPAREs, the coordinator
-- commits, then the worker runs COMMIT PREPARED. Between the last two the coordinator's snapshot
-- shows the transaction done while its rows are not yet visible on the worker. A feed therefore
-- calls this function, delegated to the worker that holds its container (distributed below),
-- after taking the coordinator's snapshot and before reading: it waits until every transaction
-- prepared on that worker at the call has been committed or rolled back (milliseconds), and gives
-- up after 5 seconds with SQLSTATE SP001 (a prepared transaction left behind by a crash, until
-- Citus's recovery resolves it), which the service answers TRY_AGAIN_LATER.
CREATE OR REPLACE FUNCTION stratus_settle_prepared(container bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  waiting text[];
  deadline timestamptz := clock_timestamp() + interval '5 seconds';
BEGIN
  SELECT array_agg(gid) INTO waiting FROM pg_prepared_xacts WHERE database = current_database();
  WHILE waiting IS NOT NULL AND EXISTS (SELECT 1 FROM pg_prepared_xacts WHERE gid = ANY (waiting)) LOOP
    IF clock_timestamp() > deadline THEN
      RAISE EXCEPTION 'a transaction prepared on this worker has not finished after 5 seconds'
        USING ERRCODE = 'SP001';
    END IF;
    PERFORM pg_sleep(0.001);
  END LOOP;
END $$;

-- Small, global, read through caches: copied to every node.
SELECT create_reference_table('containers');
SELECT create_reference_table('server_secrets');
SELECT create_reference_table('schema_migrations');
-- The people who administer containers (few, read on management requests only).
SELECT create_reference_table('operators');
SELECT create_reference_table('operator_credentials');
SELECT create_reference_table('container_members');
-- Each container environment's APNs credential (few rows, read through a cache).
SELECT create_reference_table('push_settings');

-- The rate limiter's shared counting windows (keyed by container and user, written by every
-- server process many times a second, kept only minutes): on the coordinator alone, where every
-- server process reaches them, not copied to each node.
SELECT citus_add_local_table_to_metadata('rate_windows');
-- The push outbox: a work queue every server process claims from (one statement over all
-- containers, FOR UPDATE SKIP LOCKED), kept only until the push is sent: on the coordinator too.
SELECT citus_add_local_table_to_metadata('push_outbox');

-- Tenant data, distributed by container and co-located with records.
SELECT create_distributed_table('records', 'container_id');
SELECT create_distributed_table('api_tokens', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('asset_references', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('assets', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('audit_log', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('container_imports', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('courier_tokens', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('push_devices', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('notifications', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('index_entries', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('quota_limits', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('record_references', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('request_counts', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('request_log', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('request_log_heads', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('role_members', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('schema_deploys', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('schema_fields', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('schema_grants', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('schema_index_builds', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('schema_query_shapes', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('schema_record_types', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('schema_roles', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('schema_versions', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('server_keys', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('sessions', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('share_moves', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('share_participants', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('shares', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('signature_replays', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('signup_attempts', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('signin_failures', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('subscriptions', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('usage_counters', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('users', 'container_id', colocate_with => 'records');
SELECT create_distributed_table('zones', 'container_id', colocate_with => 'records');

-- Delegated to the worker that holds the container named by its argument.
SELECT create_distributed_function('stratus_settle_prepared(bigint)', 'container', colocate_with => 'records');
