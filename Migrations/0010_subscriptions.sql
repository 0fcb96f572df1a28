-- Subscriptions (issue 26): what each user asked to be notified of, per database.
-- scope: 1 public, 2 private, 3 shared (DatabaseScope.code). owner: the subscriber.
-- kind: 1 query, 2 zone, 3 database (Subscription.Kind.code).
-- zone_name / zone_owner: the watched zone (a zone
--   subscription's, or a query subscription's that is not zone-wide); zone_owner is the zone's
--   owner in the shared database, the subscriber in the private one, '' in the public one.
-- fires_on: bits 1 create, 2 update, 4 delete. definition: the query and notificationInfo
--   dictionaries as the client gave them (JSON text), rendered back by subscriptions/list.
-- Each server process reads a container-environment's subscriptions whole (by the primary key's
-- first columns) and matches writes in memory, so no other index is needed.
CREATE TABLE subscriptions (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    scope smallint NOT NULL,
    owner text NOT NULL,
    subscription_id text NOT NULL,
    kind smallint NOT NULL,
    zone_name text,
    zone_owner text,
    fires_on smallint NOT NULL,
    fires_once boolean NOT NULL,
    definition text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    modified_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, environment, owner, scope, subscription_id)
);

-- Web courier tokens (tokens/create): each one user's long-poll URL in a container-environment.
-- token_hash: SHA-256 of the token in the URL (the token itself is never stored).
CREATE TABLE courier_tokens (
    container_id bigint NOT NULL,
    token_hash text NOT NULL,
    environment smallint NOT NULL,
    owner text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    polled_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, token_hash)
);
CREATE INDEX courier_tokens_by_owner ON courier_tokens (container_id, environment, owner);

-- Notifications waiting for one courier token, oldest first (seq). The truth of delivery: a
-- poll takes (deletes) the oldest and answers it; one whose answer could not be written is put
-- back. Rows older than the documented lifetime are swept. coalesce_key: a zone or database
-- notification's subscription; while one waits, another for the same subscription is not queued
-- (the client syncs the change feed when it gets the first, which then has both changes).
-- Unlogged: a notification says only that something changed (the change feed is the truth), so
-- after a crash PostgreSQL empties the table instead of replaying it, and queueing one writes no
-- WAL.
CREATE SEQUENCE notification_seq;
CREATE UNLOGGED TABLE notifications (
    container_id bigint NOT NULL,
    token_hash text NOT NULL,
    seq bigint NOT NULL DEFAULT nextval('notification_seq'),
    payload text NOT NULL,
    coalesce_key text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, token_hash, seq)
);
CREATE INDEX notifications_by_age ON notifications (created_at);
CREATE UNIQUE INDEX notifications_coalesced ON notifications (container_id, token_hash, coalesce_key) WHERE coalesce_key IS NOT NULL;

-- Notifications queued, per container-environment and ten seconds, beside the request counts
-- (`stratus usage`).
ALTER TABLE request_counts ADD COLUMN notifications bigint NOT NULL DEFAULT 0;
