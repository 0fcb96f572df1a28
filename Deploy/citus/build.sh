#!/usr/bin/env bash
# Builds Citus from the source the machine keeps beside the repository (../shared/vendor/, never
# committed here) and installs it into the machine's PostgreSQL 15: Debian does not package Citus
# here. Installs the build dependencies from Debian first. Skips the build when the installed
# extension already has this version. Says how long it took.
#
#   Deploy/citus/build.sh [--vendor DIR]      (default: ../shared/vendor beside the repository)
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
version=13.2.2
vendor=$(cd .. && pwd)/shared/vendor
while [ "$#" -gt 0 ]; do
  case $1 in
    --vendor) vendor=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "citus build: unknown option $1" >&2; exit 64 ;;
  esac
done
ensure_postgres
pg_config=/usr/lib/postgresql/15/bin/pg_config
if [ -x "$pg_config" ]; then
  control="$($pg_config --sharedir)/extension/citus.control"
  if [ -f "$control" ] && grep -q "default_version = '${version%.*}-" "$control" && [ -f "$($pg_config --pkglibdir)/citus.so" ] \
     && [ "$(cat "$($pg_config --pkglibdir)/citus.version" 2>/dev/null)" = "$version" ]; then
    echo "citus build: Citus $version is installed already ($($pg_config --pkglibdir)/citus.so)"
    exit 0
  fi
fi
archive=$vendor/citus-$version.tar.gz
patchfile=$vendor/citus-$version-pg15-minor.patch
if [ ! -f "$archive" ]; then
  echo "citus build: $archive not found (give --vendor DIR: the folder with citus-$version.tar.gz)" >&2
  exit 1
fi
started=$(date +%s)
sudo=""
if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
missing=()
for package in postgresql-server-dev-15 libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev make gcc patch; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "citus build: installing ${missing[*]} from Debian" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
pg_config=/usr/lib/postgresql/15/bin/pg_config
work=$(mktemp -d /tmp/citus-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
tar xzf "$archive" -C "$work"
cd "$work/citus-$version"
if [ -f "$patchfile" ]; then patch -p1 --quiet < "$patchfile"; fi
echo "citus build: configuring and compiling Citus $version (a minute or two on 2 cores)" >&2
PG_CONFIG=$pg_config ./configure --quiet >"$work/configure.log" 2>&1 || { tail -30 "$work/configure.log" >&2; exit 1; }
make -j"$(nproc)" >"$work/make.log" 2>&1 || { grep -E "error" "$work/make.log" | head -30 >&2; exit 1; }
$sudo make install >"$work/install.log" 2>&1 || { tail -30 "$work/install.log" >&2; exit 1; }
echo "$version" | $sudo tee "$($pg_config --pkglibdir)/citus.version" >/dev/null
echo "citus build: Citus $version installed into PostgreSQL 15 in $(( $(date +%s) - started )) s"
