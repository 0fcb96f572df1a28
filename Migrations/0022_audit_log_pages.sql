-- The audit log is read newest first in pages ("before" an entry's id), back to its first entry:
-- by container and id, not by time (entries written in the same instant keep their order).
CREATE INDEX audit_log_by_id ON audit_log (container_id, audit_id);
