-- Issue 26: a container-environment's limit on notifications queued per second (NULL: the
-- documented default, QuotaLimits.defaults), and how many notifications were dropped past it,
-- per container-environment and ten seconds, beside the counts `stratus usage` shows.
ALTER TABLE quota_limits ADD COLUMN notifications_per_second integer;
ALTER TABLE request_counts ADD COLUMN notifications_dropped bigint NOT NULL DEFAULT 0;
