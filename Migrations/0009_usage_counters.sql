-- Exact usage metering and storage quotas (issue 25).
--
-- Live records and their bytes (the size of their field data), counted per container-environment
-- (owner '') and per user for their private database (owner = the user's record name; records in
-- a zone shared with others count against its owner). Every write changes the counters in its
-- own statement or transaction, so they never drift from the data.
--
-- A scope's count is spread over 16 stripes, so writers never queue on one hot row: the count is
-- the sum of the stripes. Each stripe also holds a cap, its share of what the limit leaves free.
-- A single-record save counts in stripe pg_backend_pid() % 16 of its connection, checked against
-- that stripe's cap in the same statement; a transaction reserves first (stratus_usage_reserve:
-- any stripe another transaction does not hold that has room, FOR UPDATE SKIP LOCKED, preferring
-- its own) and counts there. Either keeps the stripe locked to commit. When none has room, stratus_usage_fit locks every stripe of the scope, sums them against
-- the limit and divides what is left again: exact near the limit, contention-free far from it.
-- The caps never sum past the limit and a growing write never takes a stripe past its cap, so
-- the total never passes the limit. Shrinking writes (deletes) never check a cap. A cap of 0
-- sends the next growth to the locked path (a changed limit resets the caps of its
-- container-environment to 0). A scope's stripes are made when it first writes (the server does
-- so in a transaction of its own, so two first writers do not wait on each other).
CREATE TABLE usage_counters (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    owner text NOT NULL,
    stripe smallint NOT NULL,
    records bigint NOT NULL DEFAULT 0,
    bytes bigint NOT NULL DEFAULT 0,
    records_cap bigint NOT NULL DEFAULT 0,
    bytes_cap bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (container_id, environment, owner, stripe)
) WITH (fillfactor = 50);

-- The data as it stands, in stripe 0 of each scope (caps 0: the first growth divides the rest).
INSERT INTO usage_counters (container_id, environment, owner, stripe, records, bytes)
SELECT z.container_id, z.environment, '', 0, count(*), coalesce(sum(r.size), 0)
FROM records r JOIN zones z ON z.container_id = r.container_id AND z.zone_id = r.zone_id
WHERE NOT r.deleted
GROUP BY z.container_id, z.environment;

INSERT INTO usage_counters (container_id, environment, owner, stripe, records, bytes)
SELECT z.container_id, z.environment, z.owner, 0, count(*), coalesce(sum(r.size), 0)
FROM records r JOIN zones z ON z.container_id = r.container_id AND z.zone_id = r.zone_id
WHERE NOT r.deleted AND z.database_scope = 2
GROUP BY z.container_id, z.environment, z.owner;

INSERT INTO usage_counters (container_id, environment, owner, stripe)
SELECT u.container_id, u.environment, u.owner, g FROM usage_counters u, generate_series(1, 15) g;

-- Makes room for growth by (d_records, d_bytes) in a stripe of scope o, locking it (and, on the
-- locked path, every stripe of the scope) until the transaction ends. NULL when it
-- fits; otherwise what the limit leaves free, {records, bytes}, with nothing changed.
-- The limits: the container's (o = '') or a user's private storage, from quota_limits or the
-- defaults given.
CREATE FUNCTION stratus_usage_fit(c bigint, e smallint, o text, d_records bigint, d_bytes bigint,
                                  default_records bigint, default_bytes bigint, default_user_bytes bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    s smallint := pg_backend_pid() % 16;
    chosen smallint;
    n bigint;
    total_records bigint;
    total_bytes bigint;
    limit_records bigint;
    limit_bytes bigint;
    free_records bigint;
    free_bytes bigint;
BEGIN
    SELECT stripe INTO chosen FROM usage_counters
    WHERE container_id = c AND environment = e AND owner = o
      AND (d_records <= 0 OR records + d_records <= records_cap) AND (d_bytes <= 0 OR bytes + d_bytes <= bytes_cap)
    ORDER BY stripe = s DESC LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN ARRAY[chosen::bigint];
    END IF;
    INSERT INTO usage_counters (container_id, environment, owner, stripe)
    SELECT c, e, o, g FROM generate_series(0, 15) g ON CONFLICT DO NOTHING;
    PERFORM 1 FROM usage_counters WHERE container_id = c AND environment = e AND owner = o ORDER BY stripe FOR UPDATE;
    SELECT count(*), sum(records), sum(bytes) INTO n, total_records, total_bytes
    FROM usage_counters WHERE container_id = c AND environment = e AND owner = o;
    -- Read after the stripes are locked: a limit changed meanwhile is the one that counts.
    IF o = '' THEN
        SELECT coalesce(max(q.max_records), default_records), coalesce(max(q.max_storage_bytes), default_bytes)
        INTO limit_records, limit_bytes FROM quota_limits q WHERE q.container_id = c AND q.environment = e;
    ELSE
        limit_records := 1::bigint << 60;
        SELECT coalesce(max(q.user_private_storage_bytes), default_user_bytes)
        INTO limit_bytes FROM quota_limits q WHERE q.container_id = c AND q.environment = e;
    END IF;
    free_records := limit_records - total_records - greatest(d_records, 0);
    free_bytes := limit_bytes - total_bytes - greatest(d_bytes, 0);
    IF free_records < 0 OR free_bytes < 0 THEN
        RETURN ARRAY[greatest(limit_records - total_records, 0), greatest(limit_bytes - total_bytes, 0)];
    END IF;
    UPDATE usage_counters
    SET records_cap = records + free_records / n + CASE WHEN stripe = s THEN greatest(d_records, 0) + free_records % n ELSE 0 END,
        bytes_cap = bytes + free_bytes / n + CASE WHEN stripe = s THEN greatest(d_bytes, 0) + free_bytes % n ELSE 0 END
    WHERE container_id = c AND environment = e AND owner = o;
    RETURN ARRAY[s::bigint];
END
$$;

-- Both scopes of a write: the container's, then (o <> '') the user's. When the growth fits,
-- {container stripe, user stripe (-1: none)}, locked for the write to count in; otherwise
-- {free records, free bytes, free user bytes} (2^60 where a scope has room).
CREATE FUNCTION stratus_usage_reserve(c bigint, e smallint, o text, d_records bigint, d_bytes bigint,
                                      default_records bigint, default_bytes bigint, default_user_bytes bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    container_fit bigint[];
    user_fit bigint[] := ARRAY[-1];
    plenty bigint := 1::bigint << 60;
BEGIN
    container_fit := stratus_usage_fit(c, e, '', d_records, d_bytes, default_records, default_bytes, default_user_bytes);
    IF o <> '' THEN
        user_fit := stratus_usage_fit(c, e, o, d_records, d_bytes, default_records, default_bytes, default_user_bytes);
    END IF;
    IF cardinality(container_fit) = 1 AND cardinality(user_fit) = 1 THEN
        RETURN ARRAY[container_fit[1], user_fit[1]];
    END IF;
    RETURN ARRAY[CASE WHEN cardinality(container_fit) = 2 THEN container_fit[1] ELSE plenty END,
                 CASE WHEN cardinality(container_fit) = 2 THEN container_fit[2] ELSE plenty END,
                 CASE WHEN cardinality(user_fit) = 2 THEN user_fit[2] ELSE plenty END];
END
$$;

-- Refuses (SQLSTATE SR001) a statement whose counter update left a stripe past its cap, or found
-- no stripe to count in; the writer then takes the transaction, which rebalances or answers
-- QUOTA_EXCEEDED.
CREATE FUNCTION stratus_usage_check(fits boolean) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF fits IS FALSE THEN
        RAISE EXCEPTION 'usage past this stripe''s share of a quota' USING ERRCODE = 'SR001';
    END IF;
    RETURN true;
END
$$;

-- Requests per container-environment in 10-second buckets (`stratus usage`): operations served,
-- refused with THROTTLED, and refused with QUOTA_EXCEEDED. Each server process adds its counts
-- about once a second; buckets older than two days are swept.
CREATE TABLE request_counts (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    bucket bigint NOT NULL,
    requests bigint NOT NULL DEFAULT 0,
    throttled bigint NOT NULL DEFAULT 0,
    refused bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (container_id, environment, bucket)
);

-- Rate limiting across server processes: each process's count in each one-second window per
-- limited key (a container-environment, a user, an API token, a client address). A process
-- writes only its own rows, and reads the sums about ten times a second. Unlogged: a crash only
-- forgets the current second.
CREATE UNLOGGED TABLE rate_windows (
    key text NOT NULL,
    window_start bigint NOT NULL,
    process text NOT NULL,
    count bigint NOT NULL,
    PRIMARY KEY (key, window_start, process)
);
