#!/usr/bin/env bash
# Builds Stratus (release) and runs the service. With STRATUS_DATABASE_URL unset it starts an
# embedded PostgreSQL cluster under ./.stratus. Extra arguments go to 'stratus serve'.
set -euo pipefail
cd "$(dirname "$0")/.."
. Deploy/lib.sh
ensure_postgres
build_release
exec .build/release/stratus serve "$@"
