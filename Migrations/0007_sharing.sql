-- Sharing (issue 24): record hierarchies, shares, participants, and the log that tells a
-- participant's change feed which records left what they may see.
-- Adding nullable columns without a default rewrites nothing.

-- parent: the parent record's name (CKWS `parent`), in the same zone.
-- share_name: on a shared root, the name of its `cloudkit.share` record.
-- short_guid: minted by `createShortGUID` or when the record is shared; a share's record carries its root's.
-- share_root: the shared root whose hierarchy holds the record (the root itself included), kept
--   by the writer of every change to parents and shares; participants of a hierarchy share see
--   exactly the records whose share_root is that share's root. Tombstones keep theirs.
ALTER TABLE records ADD COLUMN parent text, ADD COLUMN share_name text, ADD COLUMN short_guid text, ADD COLUMN share_root text;
CREATE INDEX records_children ON records (container_id, zone_id, parent) WHERE parent IS NOT NULL;
CREATE INDEX records_share_root ON records (container_id, zone_id, share_root, record_name) WHERE share_root IS NOT NULL;

-- One row per share (live or deleted). root_name NULL: a zone-wide share.
-- public_permission / permission: 1 NONE, 2 READ_ONLY, 3 READ_WRITE.
CREATE TABLE shares (
    container_id bigint NOT NULL,
    zone_id bigint NOT NULL,
    share_name text NOT NULL,
    root_name text,
    short_guid text NOT NULL,
    public_permission smallint NOT NULL,
    deleted boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, zone_id, share_name),
    UNIQUE (container_id, short_guid)
);

-- Participants of a share other than its owner. user_record_name NULL: an invitation to an email
-- address nobody in the container has yet; it is matched to the user who signs up with it.
-- status: 1 INVITED, 2 ACCEPTED, 3 REMOVED. kind: 3 USER, 4 PUBLIC_USER (joined through the link).
-- change_xid/change_seq move whenever the row changes (or its share is deleted), for the
-- participant's shared-database change feed.
CREATE TABLE share_participants (
    container_id bigint NOT NULL,
    zone_id bigint NOT NULL,
    share_name text NOT NULL,
    participant_id text NOT NULL,
    user_record_name text,
    email text,
    permission smallint NOT NULL,
    status smallint NOT NULL,
    kind smallint NOT NULL,
    change_xid bigint NOT NULL,
    change_seq bigint NOT NULL,
    PRIMARY KEY (container_id, zone_id, share_name, participant_id)
);
CREATE INDEX share_participants_by_user ON share_participants (container_id, user_record_name) WHERE user_record_name IS NOT NULL;
CREATE INDEX share_participants_by_email ON share_participants (container_id, lower(email)) WHERE user_record_name IS NULL;

-- A record that entered or left a shared hierarchy without being written itself (an ancestor
-- moved, was deleted or became a shared root; the share was deleted): the participants of that
-- share get it (entered) or a tombstone for it (left) from their zone feed. The record's own row
-- keeps its change tag: sharing a hierarchy does not change the owner's records.
CREATE TABLE share_moves (
    container_id bigint NOT NULL,
    zone_id bigint NOT NULL,
    share_root text NOT NULL,
    record_name text NOT NULL,
    entered boolean NOT NULL,
    change_xid bigint NOT NULL,
    change_seq bigint NOT NULL
);
CREATE INDEX share_moves_feed ON share_moves (container_id, zone_id, share_root, change_xid, change_seq);
