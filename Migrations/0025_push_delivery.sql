-- Push delivery: each container environment's APNs credential, and the pushes waiting to go.
--
-- push_settings: one row per container, environment and provider (1 APNs). The .p8 key is
-- sealed with a key derived from the server secret (AES-GCM) and never read back out of the
-- server; key id, team id and topic (the app's bundle id) are shown to the team.
CREATE TABLE push_settings (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    provider smallint NOT NULL,
    key_id text NOT NULL,
    team_id text NOT NULL,
    topic text NOT NULL,
    sealed_key bytea NOT NULL,
    set_at timestamptz NOT NULL DEFAULT now(),
    set_by text NOT NULL,
    PRIMARY KEY (container_id, environment, provider)
);

-- push_outbox: one row per notification and device, written when the write that caused it is
-- committed and before the write is answered; a row goes when the provider accepted the push or
-- refused it for good. A sender claims due rows (FOR UPDATE SKIP LOCKED) by moving their due time
-- a lease ahead, so two server processes never send one row at once; a process killed while
-- sending leaves its rows to be claimed again when the lease runs out (at least once, with the
-- same push_id, which APNs gets as apns-id). Retries move due_at by the backoff or Retry-After.
-- The device's address and keys are copied in, so a claim reads one table.
CREATE TABLE push_outbox (
    container_id bigint NOT NULL,
    -- The notification's id (ck.nid), the same for each of its devices and on every attempt.
    push_id uuid NOT NULL,
    environment smallint NOT NULL,
    -- 1 APNs, 2 Web Push (as push_devices.kind).
    kind smallint NOT NULL,
    address text NOT NULL,
    -- APNs: 1 sandbox, 2 production. Web Push: the browser's p256dh and auth.
    apns_environment smallint,
    p256dh text,
    auth text,
    -- The body to send: APNs' JSON, cut to its 4 KB; for Web Push the notification JSON.
    payload text NOT NULL,
    -- APNs: an alert (priority 10) rather than a background push (priority 5).
    alert boolean NOT NULL DEFAULT false,
    collapse_id text,
    created_at timestamptz NOT NULL DEFAULT now(),
    due_at timestamptz NOT NULL DEFAULT now(),
    attempts integer NOT NULL DEFAULT 0,
    PRIMARY KEY (container_id, push_id, address)
);
CREATE INDEX push_outbox_due ON push_outbox (due_at);
CREATE INDEX push_outbox_by_address ON push_outbox (container_id, address);

-- An operator's limit on pushes sent per second (`stratus quota set --pushes-per-second`).
ALTER TABLE quota_limits ADD COLUMN pushes_per_second bigint;

-- Pushes sent, per container-environment and ten seconds, beside the request counts.
ALTER TABLE request_counts ADD COLUMN pushes bigint NOT NULL DEFAULT 0;
