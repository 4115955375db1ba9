#!/usr/bin/env bash
# Prepares this host for aenv: the dependencies config/deps_manifest.toml lists for the selected
# virtualization mode (Debian packages, and for the container mode CRIU from another Debian suite in a
# private prefix). Idempotent and quiet: on a ready host it only checks, then prints a short summary.
# Usage: setup-host.sh [--deps-path DIR] [--mode MODE] [--no-test-tools] [--refresh-criu] [--criu-suite SUITE]
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
. "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/debian-apt.sh
. "$SCRIPT_DIR/lib/debian-apt.sh"
# shellcheck source=lib/deps-manifest.sh
. "$SCRIPT_DIR/lib/deps-manifest.sh"
# CRIU's suite and floor are the manifest's (an AENV_CRIU_SUITE or --criu-suite still wins for the suite).
AENV_CRIU_SUITE=${AENV_CRIU_SUITE:-$(aenv_manifest_get criu suite)}
AENV_CRIU_MIN_VERSION=$(aenv_manifest_get criu version)
AENV_CRIU_MIN_VERSION=${AENV_CRIU_MIN_VERSION#>=}
# shellcheck source=lib/criu-prefix.sh
. "$SCRIPT_DIR/lib/criu-prefix.sh"

usage() {
  cat <<EOF
Usage: $(basename "$0") [--deps-path DIR] [--mode MODE] [--no-test-tools] [--refresh-criu] [--criu-suite SUITE]

  --mode MODE       virtualization mode whose dependencies to install (default: \${AENV_VIRTUALIZATION_MODE:-container});
                    config/deps_manifest.toml lists them, with their versions and sources
  --no-test-tools   leave out the manifest's "test" group (registries, redis, tmux: what the test suite needs)

  --deps-path DIR   where runtime dependencies go (default: \$AENV_DEPS_PATH, else
                    \${AENV_HOME_PATH:-/var/lib/aenv}/deps, like the server config);
                    CRIU lands in DIR/criu/<version>, DIR/criu/current, DIR/criu/criu.conf
  --refresh-criu    look up the newest CRIU of the suite even if a working one is installed
  --criu-suite S    Debian suite CRIU comes from (default: \${AENV_CRIU_SUITE:-forky}, CRIU 4.2.x;
                    trixie's 4.1.1 cannot dump TCP sockets on kernels >= 6.13); switching suites
                    implies --refresh-criu
EOF
}

deps_path=${AENV_DEPS_PATH:-${AENV_HOME_PATH:-/var/lib/aenv}/deps}
refresh_criu=0
mode=${AENV_VIRTUALIZATION_MODE:-container}
groups=(runtime images test)
while [ $# -gt 0 ]; do
  case $1 in
    --mode)
      [ $# -ge 2 ] && [ -n "$2" ] || aenv_die "--mode needs a virtualization mode (e.g. container)"
      mode=$2
      shift 2
      ;;
    --no-test-tools)
      groups=(runtime images)
      shift
      ;;
    --deps-path)
      [ $# -ge 2 ] && [ -n "$2" ] || aenv_die "--deps-path needs a directory"
      deps_path=$2
      shift 2
      ;;
    --deps-path=*)
      deps_path=${1#*=}
      [ -n "$deps_path" ] || aenv_die "--deps-path needs a directory"
      shift
      ;;
    --refresh-criu)
      refresh_criu=1
      shift
      ;;
    --criu-suite)
      [ $# -ge 2 ] && [[ $2 =~ ^[a-z]+$ ]] || aenv_die "--criu-suite needs a Debian suite name (e.g. trixie)"
      AENV_CRIU_SUITE=$2
      shift 2
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      usage >&2
      aenv_die "unknown argument: $1"
      ;;
  esac
done

aenv_manifest_modes | grep -qx "$mode" ||
  aenv_die "config/deps_manifest.toml lists no dependencies for virtualization mode \"$mode\" (known: $(aenv_manifest_modes | tr '\n' ' '))"
mapfile -t HOST_PACKAGES < <(aenv_manifest_debs "$mode" "${groups[@]}")
[ "${#HOST_PACKAGES[@]}" -gt 0 ] || aenv_die "config/deps_manifest.toml lists no Debian packages for mode $mode"
if [ "${AENV_SETUP_PRINT_PACKAGES:-}" = 1 ]; then
  # What this run would install (tests of the manifest reader; nothing is touched).
  printf '%s\n' "${HOST_PACKAGES[@]}"
  exit 0
fi

aenv_require_root setup-host.sh
case $deps_path in
  /*) ;;
  *) deps_path=$PWD/$deps_path ;;
esac
[ "$(uname -m)" = x86_64 ] || aenv_die "only x86_64 hosts are supported (this is $(uname -m))"

started=$(aenv_now_ms)
home_path=${AENV_HOME_PATH:-/var/lib/aenv}
# Made owner-only from the start (the server also fixes modes at every start): sandbox uids only ever pass
# through home and deps (0711, search only) on their way to their own dirs and the tools dir.
(umask 077 && mkdir -p "$deps_path/criu")
deps_path=$(realpath "$deps_path")
criu_root=$deps_path/criu
chmod 0711 "$deps_path"
chmod 0700 "$criu_root"
if [ "$deps_path" = "$(realpath -m "$home_path")/deps" ]; then chmod 0711 "$home_path"; fi

# One setup at a time (the server may call this while an operator runs it too).
(umask 077 && : >>"$deps_path/.setup-host.lock")
exec 9>"$deps_path/.setup-host.lock"
flock 9

installed=$(aenv_ensure_debs "${HOST_PACKAGES[@]}")

aenv_criu_reconcile "$criu_root"
criu_note=present
if [ -f "$criu_root/current/.aenv/suite" ] && [ "$(cat "$criu_root/current/.aenv/suite")" != "$AENV_CRIU_SUITE" ]; then
  refresh_criu=1
fi
if [ "$refresh_criu" = 1 ] || ! aenv_criu_ready "$criu_root"; then
  aenv_log "installing CRIU from Debian $AENV_CRIU_SUITE into $criu_root ..."
  aenv_criu_install "$criu_root" >/dev/null
  criu_note=installed
  aenv_criu_ready "$criu_root" ||
    aenv_die "CRIU in $criu_root/current is not >= $AENV_CRIU_MIN_VERSION after install"
fi
aenv_criu_write_config "$criu_root"

criu_bin=$criu_root/current/bin/criu
criu_version=$(aenv_criu_version_of "$criu_bin")
criu_check_out=$("$criu_bin" --config "$criu_root/criu.conf" check 2>&1) || true
criu_check=$(printf '%s\n' "$criu_check_out" | tail -n1)
if [ "$criu_check" != "Looks good." ]; then
  printf '%s\n' "$criu_check_out" >&2
  aenv_die "'$criu_bin check' did not say 'Looks good.'"
fi

# Host limits that a node full of sandboxes reaches first (docs/operations.md#density). Raised here, never
# lowered; per-sandbox limits are the server's (docs/security.md).
# - inotify limits are counted per user, and every sandbox's use counts against host root (the creator of
#   its user namespace): the kernel defaults (128 instances) would let a few busy sandboxes take all of
#   root's and starve the host.
# - pid_max 32768 caps all sandboxes together at 16384 tasks (node_pids_limit defaults to half of it): an idle
#   sandbox has 5, a busy one hundreds. 262144 keeps that budget (131072) below threads-max on a 24 GiB host,
#   so sandboxes at their limits still cannot use up the kernel's tasks.
# - the host keeps a neighbour entry for each sandbox veth it talks to: past gc_thresh3 (1024 by default) the
#   kernel refuses new ones ("neighbour table overflow") and the sandboxes past it cannot be reached.
sysctl_conf=/etc/sysctl.d/60-aenv.conf
sysctl_note=
AENV_SYSCTLS=(
  fs.inotify.max_user_instances=8192
  fs.inotify.max_user_watches=1048576
  kernel.pid_max=262144
  net.ipv4.neigh.default.gc_thresh1=4096
  net.ipv4.neigh.default.gc_thresh2=16384
  net.ipv4.neigh.default.gc_thresh3=32768
)
for kv in "${AENV_SYSCTLS[@]}"; do
  key=${kv%%=*} want=${kv#*=}
  have=$(sysctl -n "$key")
  if [ "$have" -lt "$want" ]; then
    sysctl -q -w "$key=$want"
    sysctl_note="$sysctl_note $key=$want"
  fi
done
want_conf=$(printf '%s\n' '# aenv (scripts/setup-host.sh): host limits shared by all sandboxes (docs/operations.md#density)' \
  "${AENV_SYSCTLS[@]/=/ = }")
if [ ! -f "$sysctl_conf" ] || [ "$(cat "$sysctl_conf")" != "$want_conf" ]; then
  printf '%s\n' "$want_conf" >"$sysctl_conf"
  chmod 0644 "$sysctl_conf"
fi

printf 'setup-host: ok in %s (mode %s, config/deps_manifest.toml)\n' "$(aenv_elapsed "$started" "$(aenv_now_ms)")" "$mode"
if [ -n "$installed" ]; then
  printf '  packages: installed %s\n' "$installed"
else
  printf '  packages: all %d present\n' "${#HOST_PACKAGES[@]}"
fi
printf '  criu %s (%s): %s  %s\n' "$criu_version" "$criu_note" "$criu_check" "$criu_bin"
printf '  criu config: %s\n' "$criu_root/criu.conf"
printf '  sysctls:%s\n' "${sysctl_note:- host limits already raised} ($sysctl_conf)"
