#!/usr/bin/env bash
# THE one command that prepares a fresh machine and runs aenv's tests (as root, from a clone):
# host setup, npm ci, build, images, test services, `npm test`; the services this run started
# are stopped again on exit. Exits with the test result. Extra arguments go to vitest.
# Usage: scripts/test-all.sh [vitest args...]
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/common.sh
. "$REPO/scripts/lib/common.sh"
# shellcheck source=lib/npm-deps.sh
. "$REPO/scripts/lib/npm-deps.sh"
# shellcheck source=../test/services/lib.sh
. "$REPO/test/services/lib.sh"

aenv_require_root scripts/test-all.sh
cd "$REPO"
step_started=0
step() {
  printf '\n==> %s\n' "$*"
  step_started=$(aenv_now_ms)
}
step_done() { printf '    (%s)\n' "$(aenv_elapsed "$step_started" "$(aenv_now_ms)")"; }

step "host setup (scripts/setup-host.sh)"
scripts/setup-host.sh
step_done

step "npm dependencies"
aenv_npm_ci_if_needed "$REPO"
step_done

step "build (npm run build)"
npm run build
step_done

step "static checks (lint, format, typecheck)"
npm run --silent lint
npm run --silent format:check
npm run --silent typecheck
step_done

step "base image (scripts/build-base-image.sh)"
scripts/build-base-image.sh
step_done

step "test images (scripts/build-test-images.sh)"
scripts/build-test-images.sh
step_done

# Services already running belong to someone else's session: leave them running afterwards.
started_here=()
for name in "${SERVICES[@]}"; do
  svc_pid "$name" >/dev/null || started_here+=("$name")
done
stop_started_services() {
  if [ ${#started_here[@]} -gt 0 ]; then
    printf '\n==> stopping test services started by this run\n'
    "$REPO/test/services/stop.sh" "${started_here[@]}" || true
  fi
}
trap stop_started_services EXIT

step "test services (test/services/start.sh)"
test/services/start.sh
test/services/check.sh
eval "$(test/services/env.sh)"
step_done

step "tests (npm test)"
set +e
npm test -- "$@"
rc=$?
set -e
step_done
printf '\n==> tests %s (exit %d)\n' "$([ $rc = 0 ] && echo passed || echo FAILED)" "$rc"
exit "$rc"
