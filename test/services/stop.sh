#!/usr/bin/env bash
# Stops the test services start.sh launched (only the PIDs it recorded). Idempotent.
# Usage: stop.sh [--purge] [SERVICE...]
#   SERVICE  registry, auth-registry, redis or s3 (default: all)
#   --purge  also deletes their registry data and the state dir (only with all services)
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/common.sh
. "$HERE/../../scripts/lib/common.sh"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

purge=0
names=()
for arg in "$@"; do
  case $arg in
    --purge) purge=1 ;;
    -h | --help) sed -n '2,6p' "$0" && exit 0 ;;
    registry | auth-registry | redis | s3) names+=("$arg") ;;
    *) aenv_die "unknown argument: $arg" ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=("${SERVICES[@]}")
[ "$purge" = 0 ] || [ ${#names[@]} -eq ${#SERVICES[@]} ] || aenv_die "--purge stops every service; name none"
aenv_require_root test/services/stop.sh

[ -d "$STATE_DIR" ] || exit 0
exec 9>"$STATE_DIR/.lock"
flock 9
for name in "${names[@]}"; do
  svc_stop "$name"
done
running=0
for name in "${SERVICES[@]}"; do
  if svc_pid "$name" >/dev/null; then running=1; fi
done
[ "$running" = 1 ] || rm -f "$STATE_DIR/services.env"

if [ "$purge" = 1 ]; then
  # Registry blobs and the htpasswd file start.sh made (moto keeps buckets in memory); the
  # unpacked moto package stays for the next start.
  rm -rf "${DATA_DIR:?}/registry" "${DATA_DIR:?}/auth-registry" "${DATA_DIR:?}/auth-registry-htpasswd"
  rm -rf "${STATE_DIR:?}"
fi
