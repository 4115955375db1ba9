# npm dependencies of the checkout.
# shellcheck shell=bash

# Runs `npm ci` in repo $1 unless node_modules was installed from the current package-lock.json
# (a stamp holding the lockfile's hash is written after every successful install).
# AENV_FORCE_NPM_CI=1 always reinstalls. A lock that npm ci rejects is a bug to fix, not to work around.
aenv_npm_ci_if_needed() {
  local repo=$1 stamp want log
  stamp=$repo/node_modules/.aenv-package-lock.sha256
  want=$(sha256sum "$repo/package-lock.json" | cut -d' ' -f1)
  if [ "${AENV_FORCE_NPM_CI:-0}" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "node_modules is up to date with package-lock.json"
    return 0
  fi
  log=$(mktemp /tmp/aenv-npm-ci.XXXXXX)
  if ! (cd "$repo" && npm ci --no-audit --no-fund) >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    aenv_die "npm ci failed (see above)"
  fi
  grep -v '^npm warn' "$log" | tail -n 3
  rm -f "$log"
  printf '%s\n' "$want" >"$stamp"
}
