# The built aenv tree a deployment runs (scripts/install.sh, scripts/cluster-compose.sh): what
# `aenv` needs at run time from a built checkout, with production dependencies only.
# shellcheck shell=bash

# Fails naming what is missing when $1 is not a built checkout.
aenv_require_built_tree() {
  local src=$1 f
  for f in package.json packages/cli/dist/main.js packages/envd/dist/envd.cjs; do
    [ -e "$src/$f" ] || aenv_die "$src/$f is missing: build the checkout first (npm ci && npm run build)"
  done
}

# Copies the runtime tree of checkout $1 into the new directory $2: package manifests, every
# package's dist (and envd's native sources, compiled into the tools dir at a node's first start),
# node_modules pruned of development dependencies, config/default.toml and the host setup scripts.
aenv_copy_runtime_tree() {
  local src=$1 dest=$2 p
  mkdir -p "$dest/packages" "$dest/config" "$dest/scripts"
  cp -a "$src/package.json" "$dest/"
  [ ! -f "$src/package-lock.json" ] || cp -a "$src/package-lock.json" "$dest/"
  [ ! -f "$src/config/default.toml" ] || cp -a "$src/config/default.toml" "$dest/config/"
  for p in setup-host.sh build-base-image.sh lib; do
    [ ! -e "$src/scripts/$p" ] || cp -a "$src/scripts/$p" "$dest/scripts/"
  done
  for p in "$src"/packages/*/; do
    p=$(basename "$p")
    mkdir -p "$dest/packages/$p"
    [ ! -f "$src/packages/$p/package.json" ] || cp -a "$src/packages/$p/package.json" "$dest/packages/$p/"
    for sub in dist native node_modules; do
      [ ! -d "$src/packages/$p/$sub" ] || cp -a "$src/packages/$p/$sub" "$dest/packages/$p/"
    done
  done
  if [ -d "$src/node_modules" ]; then
    cp -a "$src/node_modules" "$dest/"
    # Offline: prune only removes what the lockfile marks as development dependencies.
    (cd "$dest" && npm prune --omit=dev --offline --no-audit --no-fund >/dev/null 2>&1) ||
      aenv_die "npm prune --omit=dev failed in $dest"
  fi
}
