-- A push's row is written and deleted within a fraction of a second; each index on it is paid
-- twice per push. Forgetting a device's waiting pushes finds them through the primary key's
-- container_id (the queue holds only pushes not yet accepted), so the address index goes.
DROP INDEX IF EXISTS push_outbox_by_address;
