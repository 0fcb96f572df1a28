-- The request log: one row per data-API request, per container-environment, kept to the newest
-- `log_requests` rows (NULL: the documented default, QuotaLimits.defaults; 0: not logged).
ALTER TABLE quota_limits ADD COLUMN log_requests bigint;

-- The last sequence number given to each container-environment's log rows. A batch takes its
-- numbers by adding to it, under the row's lock: numbers grow in commit order, and rows at or
-- below next_seq - log_requests are deleted in the same transaction.
CREATE TABLE request_log_heads (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    next_seq bigint NOT NULL,
    PRIMARY KEY (container_id, environment)
);

CREATE TABLE request_log (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    seq bigint NOT NULL,
    at timestamptz NOT NULL,
    -- 1 public, 2 private, 3 shared (DatabaseScope.code); NULL for a request that names none.
    database smallint,
    operation text NOT NULL,
    status smallint NOT NULL,
    error_code text,
    duration_us integer NOT NULL,
    user_record_name text,
    request_id text NOT NULL,
    client_address text,
    PRIMARY KEY (container_id, environment, seq)
);
