-- Containers restored from a `stratus container export` file (`stratus container import`).
-- Sync tokens the exporting server issued stay valid here: they are opened with that server's
-- sync-token key (it seals nothing else) and name the container by its id there; their change
-- positions are moved by xid_shift, the amount the import moved the rows' change_xid down so that
-- every write made here afterwards sorts after every imported change.
CREATE TABLE container_imports (
    container_id bigint NOT NULL,
    source_container_id bigint NOT NULL,
    source_name text NOT NULL,
    sync_key bytea NOT NULL,
    xid_shift bigint NOT NULL,
    imported_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, source_container_id, sync_key)
);
