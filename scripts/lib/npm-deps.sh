# npm dependencies of the checkout.
# shellcheck shell=bash

# Runs `npm ci` in repo $1 unless node_modules was installed from the current package-lock.json
# (a stamp holding the lockfile's hash is written after every successful install).
# AENV_FORCE_NPM_CI=1 always reinstalls.
aenv_npm_ci_if_needed() {
  local repo=$1 stamp want
  stamp=$repo/node_modules/.aenv-package-lock.sha256
  want=$(sha256sum "$repo/package-lock.json" | cut -d' ' -f1)
  if [ "${AENV_FORCE_NPM_CI:-0}" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "node_modules is up to date with package-lock.json"
    return 0
  fi
  (cd "$repo" && npm ci --no-audit --no-fund)
  printf '%s\n' "$want" >"$stamp"
}
