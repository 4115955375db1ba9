#!/usr/bin/env bash
# THE one command that prepares this host and runs an aenv node: host setup, npm dependencies,
# build, base image, then `aenv server` with the given arguments (as root).
# Usage: scripts/run-server.sh [aenv server args...]
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/common.sh
. "$REPO/scripts/lib/common.sh"
# shellcheck source=lib/npm-deps.sh
. "$REPO/scripts/lib/npm-deps.sh"

aenv_require_root scripts/run-server.sh
cd "$REPO"

# The server and setup-host must agree on where CRIU lives: forward --deps-path if given.
setup_args=()
prev=""
for arg in "$@"; do
  case $arg in
    --deps-path=*) setup_args=(--deps-path "${arg#*=}") ;;
  esac
  [ "$prev" != --deps-path ] || setup_args=(--deps-path "$arg")
  prev=$arg
done

printf '==> host setup\n'
scripts/setup-host.sh "${setup_args[@]}"
printf '==> npm dependencies\n'
aenv_npm_ci_if_needed "$REPO"
printf '==> build\n'
npm run build --silent
printf '==> base image\n'
scripts/build-base-image.sh
[ -f "$REPO/packages/cli/dist/main.js" ] ||
  aenv_die "packages/cli/dist/main.js was not built (the aenv CLI entry point is missing)"
printf '==> aenv server %s\n' "$*"
exec node "$REPO/packages/cli/dist/main.js" server "$@"
