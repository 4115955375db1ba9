# Building cached OCI image layouts from a root filesystem directory with umoci, published
# atomically: an interrupted build never leaves a half image at the output path.
# shellcheck shell=bash

# File in the layout dir that records what built it (the cache key and some facts).
AENV_IMAGE_BUILD_INFO=aenv-build.json

# Cache key: sha256 of the given files' contents and the extra strings.
aenv_image_cache_key() {
  local -a files=() extra=()
  while [ $# -gt 0 ]; do
    if [ "$1" = -- ]; then
      shift
      extra=("$@")
      break
    fi
    files+=("$1")
    shift
  done
  { cat "${files[@]}"; printf '%s\n' "${extra[@]}"; } | sha256sum | cut -d' ' -f1
}

# True when layout $1 exists, has tag $2 and was built with key $3.
aenv_image_is_current() {
  local layout=$1 tag=$2 key=$3
  [ -f "$layout/index.json" ] && [ -f "$layout/$AENV_IMAGE_BUILD_INFO" ] || return 1
  [ "$(jq -r .key "$layout/$AENV_IMAGE_BUILD_INFO" 2>/dev/null)" = "$key" ] || return 1
  jq -e --arg t "$tag" '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $t)' \
    "$layout/index.json" >/dev/null
}

# Clears leftovers of interrupted builds of output $1: temp dirs are removed; a previous image
# moved aside but not yet replaced is put back.
aenv_image_reconcile() {
  local out=$1 parent name d
  parent=$(dirname "$out")
  name=$(basename "$out")
  for d in "$parent/.$name.old-"*; do
    [ -d "$d" ] || continue
    if [ ! -e "$out" ] && [ -f "$d/index.json" ]; then
      mv -T "$d" "$out"
    else
      aenv_safe_rmtree "$d"
    fi
  done
  for d in "$parent/.$name.tmp-"*; do
    if [ -e "$d" ]; then aenv_safe_rmtree "$d"; fi
  done
}

# Makes a temp build dir beside output $1 (same filesystem, so the publish is a rename).
aenv_image_tmpdir() {
  local out=$1
  mkdir -p "$(dirname "$out")"
  mktemp -d "$(dirname "$out")/.$(basename "$out").tmp-XXXXXX"
}

# Packs rootfs dir $1 into a new OCI layout $2 as tag $3 (one layer), then applies the
# remaining arguments as `umoci config` options.
aenv_image_pack() {
  local rootfs=$1 layout=$2 tag=$3
  shift 3
  umoci init --layout "$layout"
  umoci new --image "$layout:$tag"
  umoci insert --image "$layout:$tag" --history.created_by "aenv $(basename "$0")" "$rootfs" /
  if [ $# -gt 0 ]; then
    umoci config --image "$layout:$tag" --history.created_by "aenv $(basename "$0")" "$@"
  fi
  umoci gc --layout "$layout"
}

# Records the build info in layout $1: key $2, seconds $3.
aenv_image_write_info() {
  local layout=$1 key=$2 seconds=$3
  jq -n --arg key "$key" --arg builtAt "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --arg seconds "$seconds" \
    --arg builder "$(basename "$0")" \
    '{key: $key, builtAt: $builtAt, buildSeconds: ($seconds | tonumber), builder: $builder}' \
    >"$layout/$AENV_IMAGE_BUILD_INFO"
}

# Replaces output $2 with finished layout $1 (rename; the old image is moved aside first and
# removed after, and aenv_image_reconcile restores it if we die in between).
aenv_image_publish() {
  local layout=$1 out=$2 old=""
  if [ -e "$out" ]; then
    old=$(mktemp -u "$(dirname "$out")/.$(basename "$out").old-XXXXXX")
    mv -T "$out" "$old"
  fi
  mv -T "$layout" "$out"
  [ -z "$old" ] || rm -rf "$old"
}

# Sum of the blob sizes of a layout, in bytes.
aenv_image_size() {
  du -sb "$1/blobs" | cut -f1
}

aenv_human_bytes() {
  numfmt --to=iec --suffix=B "$1"
}
