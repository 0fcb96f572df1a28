-- Quotas (issue 25), first part: the limits an operator sets per container and environment.
-- A NULL column takes the documented default (QuotaLimits.defaults).
CREATE TABLE quota_limits (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    max_records bigint,
    max_storage_bytes bigint,
    requests_per_second integer,
    user_requests_per_second integer,
    user_private_storage_bytes bigint,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, environment)
);
