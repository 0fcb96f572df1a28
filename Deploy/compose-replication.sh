#!/bin/bash
# Run once by the postgres image when the primary's data folder is created (compose.yaml):
# a role the replica copies and streams with.
set -e
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<'SQL'
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD 'replicator';
SQL
echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
