-- Issue 28 (Citus): every unique key of a tenant table leads with container_id, so the table can
-- be distributed by it. An API token's hash was unique across all containers; it is now unique
-- within its container (the hashes are SHA-256 of 32 random bytes: two never meet), and a plain
-- index still finds a token by its hash alone (a browser's preflight names no container).
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_token_hash_key;
CREATE UNIQUE INDEX api_tokens_by_container_hash ON api_tokens (container_id, token_hash);
CREATE INDEX api_tokens_by_hash ON api_tokens (token_hash);
