-- Assets (issue 27): the files records hold in ASSETID fields.
--
-- assets: one row per distinct content per container (content-addressed: checksum is the
-- standard base64 of the bytes' SHA-256, what clients see as `fileChecksum`). The bytes live in
-- the server's asset store: a file named by the hash under the asset directory, or a PostgreSQL
-- large object (lo_oid). used_at moves whenever an upload, a save or an assets/rereference uses
-- the asset: an asset no record references is swept once its receipts can no longer be used
-- (used_at older than their lifetime), with its bytes.
CREATE TABLE assets (
    container_id bigint NOT NULL,
    checksum text NOT NULL,
    size bigint NOT NULL,
    content_type text NOT NULL,
    lo_oid oid,
    created_at timestamptz NOT NULL DEFAULT now(),
    used_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, checksum)
);
CREATE INDEX assets_used ON assets (used_at);

-- Which live records hold which assets (one row per record and distinct asset). A record's
-- stored size (records.size, what quotas count) includes the sizes of the assets it holds.
CREATE TABLE asset_references (
    container_id bigint NOT NULL,
    zone_id bigint NOT NULL,
    record_name text NOT NULL,
    checksum text NOT NULL,
    PRIMARY KEY (container_id, zone_id, record_name, checksum)
);
CREATE INDEX asset_references_by_asset ON asset_references (container_id, checksum);
