-- The request log keeps a failed request's reason (the error dictionary's `reason`, at most 500
-- characters; empty for a success), element i as the other arrays' element i. Batches written
-- before it have an empty array: their requests read with no reason.
ALTER TABLE request_log ADD COLUMN reason text[] NOT NULL DEFAULT '{}';
