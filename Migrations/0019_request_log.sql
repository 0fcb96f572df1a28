-- The request log: every data-API request, per container-environment, kept to the newest
-- `log_requests` requests (NULL: the documented default, QuotaLimits.defaults; 0: none logged).
ALTER TABLE quota_limits ADD COLUMN log_requests bigint;

-- The last number given to a request of each container-environment. A batch takes its numbers
-- by adding to it, under the row's lock: numbers grow in commit order.
CREATE TABLE request_log_heads (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    next_seq bigint NOT NULL,
    PRIMARY KEY (container_id, environment)
);

-- One row per batch of a container-environment's requests (the writer's, about a second's):
-- request first_seq + i - 1 is element i of each array. A row per request cost PostgreSQL about
-- as much CPU as the lookup it logged; a batch is one index entry and one array of each column.
-- Requests numbered at or below next_seq - log_requests are past the limit: readers skip them,
-- and a batch whose last one is past it is deleted. Empty strings stand for none, and database
-- 0 for a request that named no database (PostgresNIO binds no NULL inside an array).
CREATE TABLE request_log (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    first_seq bigint NOT NULL,
    last_seq bigint NOT NULL,
    first_at timestamptz NOT NULL,
    last_at timestamptz NOT NULL,
    at timestamptz[] NOT NULL,
    -- 1 public, 2 private, 3 shared (DatabaseScope.code), 0 none.
    database smallint[] NOT NULL,
    operation text[] NOT NULL,
    status smallint[] NOT NULL,
    error_code text[] NOT NULL,
    duration_us integer[] NOT NULL,
    user_record_name text[] NOT NULL,
    request_id text[] NOT NULL,
    client_address text[] NOT NULL,
    PRIMARY KEY (container_id, environment, first_seq)
);
-- Out of line, uncompressed: compressing a busy container's batch (a megabyte or more) cost
-- more CPU than writing it.
ALTER TABLE request_log
    ALTER COLUMN at SET STORAGE EXTERNAL, ALTER COLUMN database SET STORAGE EXTERNAL, ALTER COLUMN operation SET STORAGE EXTERNAL,
    ALTER COLUMN status SET STORAGE EXTERNAL, ALTER COLUMN error_code SET STORAGE EXTERNAL, ALTER COLUMN duration_us SET STORAGE EXTERNAL,
    ALTER COLUMN user_record_name SET STORAGE EXTERNAL, ALTER COLUMN request_id SET STORAGE EXTERNAL,
    ALTER COLUMN client_address SET STORAGE EXTERNAL;
