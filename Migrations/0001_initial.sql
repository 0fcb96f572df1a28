-- Stratus initial schema. Every tenant table's primary key starts with container_id.
-- Environment codes: 1 = development, 2 = production. Database codes: 1 public, 2 private, 3 shared.

CREATE SEQUENCE change_seq;

CREATE TABLE server_secrets (
    name text PRIMARY KEY,
    secret bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE containers (
    container_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE,
    -- salt mixed into this container's user record names, so identities differ per container
    identity_salt bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_tokens (
    container_id bigint NOT NULL,
    token_id bigint GENERATED ALWAYS AS IDENTITY,
    environment smallint NOT NULL,
    name text NOT NULL,
    token_hash bytea NOT NULL UNIQUE,
    token_prefix text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    PRIMARY KEY (container_id, token_id)
);

CREATE TABLE users (
    container_id bigint NOT NULL,
    user_record_name text NOT NULL,
    email text NOT NULL,
    password_hash text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, user_record_name),
    UNIQUE (container_id, email)
);

-- Zones. The default zone of each database gets a row the first time it is written.
-- owner is the owning user record name; '' for the public database.
-- change_xid/change_seq move when the zone or (in private and shared databases) its records change:
-- changes/database reads them, ordered by (change_xid, change_seq).
CREATE TABLE zones (
    container_id bigint NOT NULL,
    zone_id bigint NOT NULL,
    environment smallint NOT NULL,
    database_scope smallint NOT NULL,
    owner text NOT NULL,
    zone_name text NOT NULL,
    deleted boolean NOT NULL DEFAULT false,
    change_xid bigint NOT NULL,
    change_seq bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, zone_id),
    UNIQUE (container_id, environment, database_scope, owner, zone_name)
);
CREATE SEQUENCE zone_id_seq;
CREATE INDEX zones_changes ON zones (container_id, environment, database_scope, owner, change_xid, change_seq);

-- Records, live and tombstones. fields is the canonical wire JSON of the typed fields.
-- change_xid is the writing transaction's id; change feeds return rows ordered by
-- (change_xid, change_seq) and only those whose transaction finished before the reader's
-- snapshot xmin, so a reader never moves past a change that commits later.
CREATE TABLE records (
    container_id bigint NOT NULL,
    zone_id bigint NOT NULL,
    record_name text NOT NULL,
    record_type text NOT NULL,
    change_xid bigint NOT NULL,
    change_seq bigint NOT NULL,
    fields text NOT NULL,
    created_at bigint NOT NULL,
    created_by text NOT NULL,
    modified_at bigint NOT NULL,
    modified_by text NOT NULL,
    deleted boolean NOT NULL DEFAULT false,
    size integer NOT NULL,
    PRIMARY KEY (container_id, zone_id, record_name)
);
CREATE INDEX records_changes ON records (container_id, zone_id, change_xid, change_seq);
CREATE INDEX records_by_type ON records (container_id, zone_id, record_type, record_name) WHERE NOT deleted;

-- Secondary index entries, maintained in the writing transaction for indexed fields.
-- One row per (record, field, distinct value); lists get one row per distinct element.
CREATE TABLE index_entries (
    container_id bigint NOT NULL,
    zone_id bigint NOT NULL,
    record_type text NOT NULL,
    field text NOT NULL,
    v_int bigint,
    v_double double precision,
    v_text text,
    record_name text NOT NULL
);
CREATE INDEX index_entries_int ON index_entries (container_id, zone_id, record_type, field, v_int, record_name) WHERE v_int IS NOT NULL;
CREATE INDEX index_entries_double ON index_entries (container_id, zone_id, record_type, field, v_double, record_name) WHERE v_double IS NOT NULL;
-- text values compare byte-wise (COLLATE "C") whatever the database's collation
CREATE INDEX index_entries_text ON index_entries (container_id, zone_id, record_type, field, v_text COLLATE "C", record_name) WHERE v_text IS NOT NULL;
CREATE INDEX index_entries_record ON index_entries (container_id, zone_id, record_name);

-- References with an action (VALIDATE or DELETE_SELF), for enforcement on delete.
CREATE TABLE record_references (
    container_id bigint NOT NULL,
    zone_id bigint NOT NULL,
    target_name text NOT NULL,
    source_name text NOT NULL,
    field text NOT NULL,
    action smallint NOT NULL, -- 1 VALIDATE, 2 DELETE_SELF
    PRIMARY KEY (container_id, zone_id, target_name, source_name, field)
);
CREATE INDEX record_references_source ON record_references (container_id, zone_id, source_name);

-- Schema per container-environment: record types, fields and their index options.
CREATE TABLE schema_versions (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    version bigint NOT NULL,
    PRIMARY KEY (container_id, environment)
);

CREATE TABLE schema_record_types (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    record_type text NOT NULL,
    PRIMARY KEY (container_id, environment, record_type)
);

CREATE TABLE schema_fields (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    record_type text NOT NULL,
    field text NOT NULL,
    field_type text NOT NULL,
    queryable boolean NOT NULL,
    sortable boolean NOT NULL,
    searchable boolean NOT NULL,
    PRIMARY KEY (container_id, environment, record_type, field)
);
