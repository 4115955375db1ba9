# Shared helpers for aenv's host scripts. Source it; it defines functions only.
# shellcheck shell=bash

aenv_log() { printf '%s\n' "$*" >&2; }
aenv_die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

aenv_require_root() {
  [ "$(id -u)" -eq 0 ] || aenv_die "$1 must run as root"
}

aenv_now_ms() { date +%s%3N; }

# Seconds with one decimal between two aenv_now_ms stamps.
aenv_elapsed() {
  local ms=$(($2 - $1))
  printf '%d.%d s' $((ms / 1000)) $(((ms % 1000) / 100))
}

# Packages from the argument list that dpkg does not report as installed.
aenv_missing_debs() {
  local pkg status
  for pkg in "$@"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = installed ] || printf '%s\n' "$pkg"
  done
}

# Installs whichever of the given Debian packages are missing. apt-get runs only when
# something is missing; its output goes to a log that is printed only on failure.
# Prints the names it installed (nothing when all were present).
aenv_ensure_debs() {
  local missing log
  missing=$(aenv_missing_debs "$@")
  [ -n "$missing" ] || return 0
  log=$(mktemp /tmp/aenv-apt.XXXXXX)
  # shellcheck disable=SC2086 # word splitting of the package list is intended
  if ! { DEBIAN_FRONTEND=noninteractive apt-get -q update &&
    DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends $missing; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    aenv_die "apt-get could not install: $(echo $missing)"
  fi
  rm -f "$log"
  echo $missing
}
