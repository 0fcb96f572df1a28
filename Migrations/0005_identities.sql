-- Identities and security (issue 23): sessions that end, sign-in throttling, user state,
-- custom-role members, server-to-server keys, API token options and the audit log.

-- A web auth token names one session. Signing out, a password change or disabling the user ends
-- it (ended_at); last_used_at moves at most once a minute per server process, for the idle limit.
CREATE TABLE sessions (
    container_id bigint NOT NULL,
    session_id bigint GENERATED ALWAYS AS IDENTITY,
    environment smallint NOT NULL,
    user_record_name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    ended_at timestamptz,
    end_reason text,
    PRIMARY KEY (container_id, session_id)
);
CREATE INDEX sessions_live_by_user ON sessions (container_id, user_record_name) WHERE ended_at IS NULL;

-- Failed sign-ins in the current window, per account ('email:…') and per client address ('address:…').
CREATE TABLE signin_failures (
    container_id bigint NOT NULL,
    key text NOT NULL,
    window_start timestamptz NOT NULL,
    failures integer NOT NULL,
    PRIMARY KEY (container_id, key)
);

ALTER TABLE users ADD COLUMN disabled_at timestamptz;
ALTER TABLE users ADD COLUMN discoverable boolean NOT NULL DEFAULT false;
ALTER TABLE users ADD COLUMN given_name text;
ALTER TABLE users ADD COLUMN family_name text;
ALTER TABLE users ADD COLUMN password_changed_at timestamptz;

-- Members of custom security roles (CREATE ROLE in the schema), per environment.
CREATE TABLE role_members (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    role text NOT NULL,
    user_record_name text NOT NULL,
    added_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, environment, role, user_record_name)
);
CREATE INDEX role_members_by_user ON role_members (container_id, environment, user_record_name);

-- Server-to-server keys: a P-256 public key (X9.63 bytes) per key id.
CREATE TABLE server_keys (
    container_id bigint NOT NULL,
    key_id text NOT NULL,
    environment smallint NOT NULL,
    name text NOT NULL,
    public_key bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    PRIMARY KEY (container_id, key_id)
);

-- Signed requests seen within their validity window: (key, date, body hash, path) once only.
CREATE TABLE signature_replays (
    container_id bigint NOT NULL,
    key_id text NOT NULL,
    digest bytea NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (container_id, key_id, digest)
);

ALTER TABLE api_tokens ADD COLUMN allowed_origins text[] NOT NULL DEFAULT '{}';
ALTER TABLE api_tokens ADD COLUMN signin_callback text;

-- Every management action, written in the action's own transaction.
CREATE TABLE audit_log (
    container_id bigint NOT NULL,
    audit_id bigint GENERATED ALWAYS AS IDENTITY,
    at timestamptz NOT NULL DEFAULT now(),
    actor text NOT NULL,
    address text NOT NULL DEFAULT '',
    action text NOT NULL,
    environment smallint,
    target text NOT NULL DEFAULT '',
    detail text NOT NULL DEFAULT '',
    PRIMARY KEY (container_id, audit_id)
);
CREATE INDEX audit_log_by_time ON audit_log (container_id, at);
