#!/usr/bin/env bash
# Prints `export` lines describing the test services (addresses, credentials, image refs).
# Use: eval "$(test/services/env.sh)"
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
if [ -f "$STATE_DIR/services.env" ]; then
  cat "$STATE_DIR/services.env"
else
  echo "# test services are not running (test/services/start.sh); these are the defaults" >&2
  services_env
fi
