# Shared helpers for the Deploy scripts. Source it; it defines functions only.

# Installs Debian's PostgreSQL server binaries when initdb is missing (needs root or sudo).
ensure_postgres() {
  if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
    return 0
  fi
  echo "Deploy: PostgreSQL server binaries not found; installing Debian's postgresql package" >&2
  local sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
}
