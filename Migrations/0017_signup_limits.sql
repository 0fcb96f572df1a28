-- Sign-up limits per container-environment (NULL: the documented default, QuotaLimits.defaults),
-- the attempts counted against them, and the sign-ups `stratus usage` shows.
ALTER TABLE quota_limits ADD COLUMN signups_per_address_per_hour bigint, ADD COLUMN signups_per_hour bigint;

-- One row per client address ('address:' and the address) and one for the environment's total
-- (''): the attempts in the hour that began at window_start. A window past its hour starts again
-- at the next attempt; old rows are swept with the rate counters.
CREATE TABLE signup_attempts (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    key text NOT NULL,
    window_start timestamptz NOT NULL,
    attempts integer NOT NULL,
    PRIMARY KEY (container_id, environment, key)
);

-- Sign-up attempts let through, and refused past a limit, per container-environment and ten seconds.
ALTER TABLE request_counts ADD COLUMN signups bigint NOT NULL DEFAULT 0, ADD COLUMN signups_throttled bigint NOT NULL DEFAULT 0;
