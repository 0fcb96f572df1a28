-- Devices a user's subscriptions push to (`tokens/register`): an APNs device token (in hex, as
-- Apple's /3/device/ path takes it) for the APNs environment the app registered in, or a Web
-- Push subscription (its endpoint and the browser's keys). One row per device and container
-- environment; registering again refreshes it, and a device registered by another user of the
-- same container environment passes to the new one (a device is one person's at a time). Rows go
-- when the user's sessions all end (signed out everywhere, disabled, password changed, erased).
CREATE TABLE push_devices (
    container_id bigint NOT NULL,
    environment smallint NOT NULL,
    -- 1 APNs, 2 Web Push.
    kind smallint NOT NULL,
    -- APNs: the device token in lowercase hex; Web Push: the endpoint URL.
    address text NOT NULL,
    user_record_name text NOT NULL,
    -- APNs: 1 development (the sandbox), 2 production.
    apns_environment smallint,
    -- Web Push: the browser's P-256 public key and authentication secret (base64url).
    p256dh text,
    auth text,
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container_id, environment, kind, address)
);
CREATE INDEX push_devices_by_user ON push_devices (container_id, user_record_name);
