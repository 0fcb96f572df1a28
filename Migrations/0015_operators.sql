-- Operators: the people who administer containers through the management API and the CLI
-- (`stratus operator`, `stratus team`, `stratus login`). A superuser administers every
-- container; anyone else only the containers whose team they are in, with one role each.
CREATE TABLE operators (
    operator_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- lower-cased; one account per address
    email text NOT NULL UNIQUE,
    -- bcrypt, as users' passwords are
    password_hash text NOT NULL,
    superuser boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz,
    password_changed_at timestamptz
);

-- What `stratus login` and the console's sign-in exchange a password for: a bearer credential
-- (the console keeps it in a cookie), stored by its SHA-256 hash only. Revoked on logout, on a
-- password change (all but the one that changed it), when the operator is disabled or removed.
CREATE TABLE operator_credentials (
    credential_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- NULL for a console session opened with the admin token (admin_token_hash then says which)
    operator_id bigint REFERENCES operators ON DELETE CASCADE,
    admin_token_hash bytea,
    token_hash bytea NOT NULL UNIQUE,
    -- 'cli' (stratus login) or 'console'
    kind text NOT NULL DEFAULT 'cli',
    -- where it was made, e.g. 'stratus login on laptop'
    name text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    expires_at timestamptz,
    -- a console session ends after this long unused
    idle_seconds integer,
    revoked_at timestamptz,
    CHECK ((operator_id IS NULL) = (admin_token_hash IS NOT NULL))
);
CREATE INDEX operator_credentials_by_operator ON operator_credentials (operator_id);

-- A container's team: each member's role (1 viewer, 2 developer, 3 owner; see TeamRole).
CREATE TABLE container_members (
    container_id bigint NOT NULL REFERENCES containers,
    operator_id bigint NOT NULL REFERENCES operators ON DELETE CASCADE,
    role smallint NOT NULL CHECK (role BETWEEN 1 AND 3),
    added_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, operator_id)
);
CREATE INDEX container_members_by_operator ON container_members (operator_id);
