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

# Installs Debian's Chromium and Python 3 when missing (the sign-in page is tested in a real
# headless browser, driven by a Python script that needs nothing beyond the standard library).
ensure_browser() {
  if command -v chromium >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then
    return 0
  fi
  echo "Deploy: chromium or python3 not found; installing Debian's chromium and python3 packages" >&2
  local sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium python3 >/dev/null
}
