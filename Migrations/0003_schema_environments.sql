-- Schema environments and promotion (issue 3): grants, roles, field declarations, deploy
-- history, production index builds, and the query shapes development has used.

ALTER TABLE schema_fields ADD COLUMN encrypted boolean NOT NULL DEFAULT false;
ALTER TABLE schema_fields ADD COLUMN number_declaration text;

CREATE TABLE schema_grants (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    record_type text NOT NULL,
    role text NOT NULL,
    permissions text[] NOT NULL,
    PRIMARY KEY (container_id, environment, record_type, role)
);

CREATE TABLE schema_roles (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    role text NOT NULL,
    PRIMARY KEY (container_id, environment, role)
);

CREATE TABLE schema_deploys (
    container_id bigint NOT NULL,
    deploy_id bigint GENERATED ALWAYS AS IDENTITY,
    environment smallint NOT NULL,
    version bigint NOT NULL,
    deployed_by text NOT NULL,
    deployed_at timestamptz NOT NULL DEFAULT now(),
    kind text NOT NULL,
    plan text NOT NULL,
    PRIMARY KEY (container_id, deploy_id)
);

-- Index entries being built for production records after a deploy added an index option.
-- A field is usable in queries only once its build is done.
CREATE TABLE schema_index_builds (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    record_type text NOT NULL,
    field text NOT NULL,
    next_zone bigint NOT NULL DEFAULT 0,
    next_record text NOT NULL DEFAULT '',
    built bigint NOT NULL DEFAULT 0,
    total bigint NOT NULL,
    done boolean NOT NULL DEFAULT false,
    PRIMARY KEY (container_id, environment, record_type, field)
);

-- Fields development queries filtered or sorted on, for deploy warnings.
CREATE TABLE schema_query_shapes (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    record_type text NOT NULL,
    field text NOT NULL,
    usage text NOT NULL,
    last_used timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, environment, record_type, field, usage)
);
