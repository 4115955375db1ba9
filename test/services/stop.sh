#!/usr/bin/env bash
# Stops the test services start.sh launched (only the PIDs it recorded). Idempotent.
# Usage: stop.sh [--purge]   --purge also deletes their data ($AENV_TEST_DATA) and state dir.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/common.sh
. "$HERE/../../scripts/lib/common.sh"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

purge=0
for arg in "$@"; do
  case $arg in
    --purge) purge=1 ;;
    -h | --help) sed -n '2,4p' "$0" && exit 0 ;;
    *) aenv_die "unknown argument: $arg" ;;
  esac
done
aenv_require_root test/services/stop.sh

[ -d "$STATE_DIR" ] || exit 0
exec 9>"$STATE_DIR/.lock"
flock 9
for name in "${SERVICES[@]}"; do
  svc_stop "$name"
done
rm -f "$STATE_DIR/services.env"

if [ "$purge" = 1 ]; then
  # Only the registry and bucket data this script's start.sh made; moto's unpacked package stays.
  rm -rf "${DATA_DIR:?}/registry" "${DATA_DIR:?}/auth-registry" "${DATA_DIR:?}/auth-registry-htpasswd"
  rm -rf "${STATE_DIR:?}"
fi
