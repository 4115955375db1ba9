# npm dependencies of the checkout.
# shellcheck shell=bash

# Runs `npm ci` in repo $1 unless node_modules was installed from the current package-lock.json
# (a stamp holding the lockfile's hash is written after every successful install).
# AENV_FORCE_NPM_CI=1 always reinstalls.
#
# If npm ci refuses because package.json and the lock are "out of sync", it falls back to
# `npm install --no-save` with a loud warning and keeps package-lock.json byte-for-byte. This
# happens when a locked package declares an optional dependency that the registry does not serve
# (vite 8 and `napi-windows-process-start-time`), so npm could not record it in the lock.
aenv_npm_ci_if_needed() {
  local repo=$1 stamp want log backup
  stamp=$repo/node_modules/.aenv-package-lock.sha256
  want=$(sha256sum "$repo/package-lock.json" | cut -d' ' -f1)
  if [ "${AENV_FORCE_NPM_CI:-0}" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "node_modules is up to date with package-lock.json"
    return 0
  fi
  log=$(mktemp /tmp/aenv-npm-ci.XXXXXX)
  if (cd "$repo" && npm ci --no-audit --no-fund) >"$log" 2>&1; then
    grep -v '^npm warn' "$log" | tail -n 3
  else
    if ! grep -q 'can only install packages when your package.json and package-lock.json' "$log"; then
      cat "$log" >&2
      rm -f "$log"
      aenv_die "npm ci failed"
    fi
    grep -E '^npm error (Missing|Invalid):' "$log" >&2 || true
    aenv_log "WARNING: npm ci refused package-lock.json (see above); falling back to 'npm install --no-save'," \
      "which leaves the lock file unchanged. Fix the lock file so that npm ci works."
    backup=$(mktemp /tmp/aenv-package-lock.XXXXXX)
    cp "$repo/package-lock.json" "$backup"
    if ! (cd "$repo" && npm install --no-save --no-audit --no-fund); then
      cp "$backup" "$repo/package-lock.json"
      rm -f "$log" "$backup"
      aenv_die "npm install failed"
    fi
    if ! cmp -s "$backup" "$repo/package-lock.json"; then
      cp "$backup" "$repo/package-lock.json"
      aenv_log "npm install changed package-lock.json; the original was put back"
    fi
    rm -f "$backup"
  fi
  rm -f "$log"
  printf '%s\n' "$want" >"$stamp"
}
