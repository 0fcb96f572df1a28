#!/usr/bin/env bash
# Builds Citus from the source the machine keeps beside the repository (../shared/vendor/, never
# committed here), with every citus-<version>-*.patch there applied, and installs it into the
# machine's PostgreSQL 15: Debian does not package Citus here. Installs the build dependencies
# from Debian first. Skips the build when the installed extension is this version with these
# patches (an install without one of them is built again). Says how long it took.
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
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "citus build: unknown option $1" >&2; exit 64 ;;
  esac
done
ensure_postgres
# What the install is stamped with: the version and the patches applied (name and checksum).
patches=("$vendor"/citus-"$version"-*.patch)
[ -e "${patches[0]}" ] || patches=()
stamp=$version
for patchfile in "${patches[@]}"; do stamp="$stamp $(basename "$patchfile" .patch):$(sha256sum "$patchfile" | cut -c1-12)"; done
pg_config=/usr/lib/postgresql/15/bin/pg_config
if [ -x "$pg_config" ]; then
  control="$($pg_config --sharedir)/extension/citus.control"
  if [ -f "$control" ] && grep -q "default_version = '${version%.*}-" "$control" && [ -f "$($pg_config --pkglibdir)/citus.so" ] \
     && [ "$(cat "$($pg_config --pkglibdir)/citus.version" 2>/dev/null)" = "$stamp" ]; then
    echo "citus build: Citus $stamp is installed already ($($pg_config --pkglibdir)/citus.so)"
    exit 0
  fi
fi
archive=$vendor/citus-$version.tar.gz
if [ ! -f "$archive" ] && [ -x "$pg_config" ] && [ -f "$($pg_config --pkglibdir)/citus.so" ] \
   && [ "$(cut -d' ' -f1 "$($pg_config --pkglibdir)/citus.version" 2>/dev/null)" = "$version" ]; then
  # (Nothing here to build it again from: the install is used as it is.)
  echo "citus build: $archive not found; using the installed Citus ($(cat "$($pg_config --pkglibdir)/citus.version"))" >&2
  exit 0
fi
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
for patchfile in "${patches[@]}"; do
  echo "citus build: applying $(basename "$patchfile")" >&2
  patch -p1 --quiet < "$patchfile"
done
echo "citus build: configuring and compiling Citus $version (a minute or two on 2 cores)" >&2
PG_CONFIG=$pg_config ./configure --quiet >"$work/configure.log" 2>&1 || { tail -30 "$work/configure.log" >&2; exit 1; }
make -j"$(nproc)" >"$work/make.log" 2>&1 || { grep -E "error" "$work/make.log" | head -30 >&2; exit 1; }
$sudo make install >"$work/install.log" 2>&1 || { tail -30 "$work/install.log" >&2; exit 1; }
echo "$stamp" | $sudo tee "$($pg_config --pkglibdir)/citus.version" >/dev/null
echo "citus build: Citus $stamp installed into PostgreSQL 15 in $(( $(date +%s) - started )) s"
