#!/usr/bin/env bash
# Pushes to devices end to end (Deploy/push/e2e.py): the built `stratus serve`
# (.build/debug/stratus or $STRATUS_BINARY), a PostgreSQL cluster of its own, and stand-ins of
# APNs (HTTP/2 over TLS) and a Web Push service on loopback, trusted through --push-ca-file. Its
# logs go to .build/test-output/push/. Run by Deploy/test.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
out=.build/test-output/push
binary=$(realpath "${STRATUS_BINARY:-.build/debug/stratus}")
ensure_postgres
ensure_python_tools
rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d /tmp/stratus-push.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
Deploy/tls/make-certs.sh "$work/certs" 2>/dev/null
"$PYTHON_TOOLS/python" Deploy/push/e2e.py "$binary" "$work/certs" "$(realpath "$out")"
