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

# Packages from the argument list that dpkg does not report as installed (one dpkg-query call).
aenv_missing_debs() {
  local -A ok=()
  local pkg status
  while read -r pkg status; do
    [ "$status" != installed ] || ok[${pkg%%:*}]=1
  done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "$@" 2>/dev/null || true)
  for pkg in "$@"; do
    [ -n "${ok[$pkg]:-}" ] || printf '%s\n' "$pkg"
  done
}

# Installs whichever of the given Debian packages are missing. apt-get runs only when
# something is missing; its output goes to a log that is printed only on failure.
# Prints the names it installed (nothing when all were present).
aenv_ensure_debs() {
  local missing log
  missing=$(aenv_missing_debs "$@" | tr '\n' ' ')
  missing=${missing% }
  [ -n "$missing" ] || return 0
  log=$(mktemp /tmp/aenv-apt.XXXXXX)
  # shellcheck disable=SC2086 # word splitting of the package list is intended
  if ! { DEBIAN_FRONTEND=noninteractive apt-get -q update &&
    DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends $missing; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    aenv_die "apt-get could not install: $missing"
  fi
  rm -f "$log"
  printf '%s\n' "$missing"
}

# Removes a build tree that a killed chroot tool may have left mounts in: unmounts everything
# below it (deepest first), then deletes without crossing into other filesystems.
aenv_safe_rmtree() {
  local dir=$1 mnt
  [ -e "$dir" ] || return 0
  dir=$(realpath "$dir")
  case $dir in
    / | /usr | /etc | /var | /home | /root | /tmp) aenv_die "refusing to remove $dir" ;;
  esac
  while IFS= read -r mnt; do
    umount -l "$mnt" 2>/dev/null || true
  done < <(awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  rm -rf --one-file-system "$dir"
}
