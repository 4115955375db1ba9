#!/usr/bin/env bash
# Builds aenv's default `base` image: Debian bookworm (mmdebstrap, mirror from the host's apt
# sources) with the tools an agent expects and a passwordless-sudo user `user` (1000:1000).
# Output: an OCI image layout (tag `latest` by default). Cached: rebuilt only when this script,
# its helpers or the package list change, or with --force.
# Usage: build-base-image.sh [--force] [--output DIR] [--tag TAG] [--deb-cache DIR]
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
. "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/debian-apt.sh
. "$SCRIPT_DIR/lib/debian-apt.sh"
# shellcheck source=lib/oci-image.sh
. "$SCRIPT_DIR/lib/oci-image.sh"

SUITE=bookworm
# C.UTF-8 ships with libc in bookworm, so no `locales` package is needed.
PACKAGES=(
  bash coreutils procps python3 python3-pip python3-venv git curl wget ca-certificates sudo iproute2
  less vim-tiny unzip xz-utils tzdata netbase
)
# Keep the image lean: no man pages, info or translations; copyright files stay.
# force-unsafe-io: no fsync per unpacked file; the build is packed into a layer at the end anyway,
# and on this 2-core host dpkg's fsyncs dominate the build. (mmdebstrap keeps these options in the
# image's /etc/dpkg/dpkg.cfg.d/, so they apply to apt inside sandboxes too.)
DPKG_OPTS=(
  'force-unsafe-io'
  'path-exclude=/usr/share/man/*'
  'path-exclude=/usr/share/info/*'
  'path-exclude=/usr/share/locale/*'
  'path-include=/usr/share/locale/locale.alias'
  'path-exclude=/usr/share/doc/*'
  'path-include=/usr/share/doc/*/copyright'
)
IMAGE_ENV=(
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  LANG=C.UTF-8
)

usage() {
  cat <<EOF
Usage: $(basename "$0") [--force] [--output DIR] [--tag TAG] [--deb-cache DIR]

  --output DIR     OCI layout to write (default: /var/cache/aenv/images/base)
  --tag TAG        image tag in the layout (default: latest)
  --deb-cache DIR  .debs kept between builds so a rebuild downloads only what changed
                   (default: /var/cache/aenv/debs/$SUITE)
  --force          rebuild even when the cached image is current
EOF
}

out=/var/cache/aenv/images/base
deb_cache=/var/cache/aenv/debs/$SUITE
tag=latest
force=0
while [ $# -gt 0 ]; do
  case $1 in
    --force) force=1 && shift ;;
    --output)
      [ $# -ge 2 ] && [ -n "$2" ] || aenv_die "--output needs a directory"
      out=$2 && shift 2
      ;;
    --deb-cache)
      [ $# -ge 2 ] && [ -n "$2" ] || aenv_die "--deb-cache needs a directory"
      deb_cache=$2 && shift 2
      ;;
    --tag)
      [ $# -ge 2 ] && [[ $2 =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || aenv_die "--tag needs a valid OCI tag"
      tag=$2 && shift 2
      ;;
    -h | --help) usage && exit 0 ;;
    *) usage >&2 && aenv_die "unknown argument: $1" ;;
  esac
done

aenv_require_root build-base-image.sh
for tool in mmdebstrap umoci jq; do
  command -v "$tool" >/dev/null || aenv_die "$tool is missing; run scripts/setup-host.sh first"
done
case $out in /*) ;; *) out=$PWD/$out ;; esac
case $deb_cache in /*) ;; *) deb_cache=$PWD/$deb_cache ;; esac
mkdir -p "$(dirname "$out")" "$deb_cache"

key=$(aenv_image_cache_key "$0" "$SCRIPT_DIR/lib/oci-image.sh" -- "$SUITE" "${PACKAGES[*]}" "${DPKG_OPTS[*]}" "${IMAGE_ENV[*]}")

exec 9>"$(dirname "$out")/.$(basename "$out").lock"
flock 9
aenv_image_reconcile "$out"

if [ "$force" = 0 ] && aenv_image_is_current "$out" "$tag" "$key"; then
  printf 'base image: up to date at %s:%s (%s)\n' "$out" "$tag" "$(aenv_human_bytes "$(aenv_image_size "$out")")"
  exit 0
fi

started=$(aenv_now_ms)
mirror=$(aenv_debian_mirror)
security=$(aenv_debian_security_mirror)
sources=("deb $mirror $SUITE main" "deb $mirror $SUITE-updates main")
[ -z "$security" ] || sources+=("deb $security $SUITE-security main")

tmp=$(aenv_image_tmpdir "$out")
# shellcheck disable=SC2064 # expand now: remove exactly this build dir on any exit
trap "aenv_safe_rmtree '$tmp'" EXIT
rootfs=$tmp/rootfs

dpkgopt_args=()
for o in "${DPKG_OPTS[@]}"; do dpkgopt_args+=("--dpkgopt=$o"); done

log=$tmp/mmdebstrap.log
# The .deb cache: synced in before apt runs, replaced by this build's set afterwards (so it holds
# only current versions); --skip=essential/unlink keeps the essential set's .debs for that.
if ! mmdebstrap --variant=minbase --mode=root --format=directory --skip=essential/unlink \
  --include="$(IFS=,; echo "${PACKAGES[*]}")" \
  "${dpkgopt_args[@]}" \
  --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
  --setup-hook="sync-in '$deb_cache' /var/cache/apt/archives/" \
  --customize-hook="find '$deb_cache' -maxdepth 1 -name '*.deb' -delete" \
  --customize-hook="sync-out /var/cache/apt/archives '$deb_cache'" \
  --customize-hook='chroot "$1" groupadd --gid 1000 user' \
  --customize-hook='chroot "$1" useradd --uid 1000 --gid 1000 --create-home --home-dir /home/user --shell /bin/bash user' \
  --customize-hook='printf "user ALL=(ALL:ALL) NOPASSWD: ALL\n" > "$1/etc/sudoers.d/user" && chmod 0440 "$1/etc/sudoers.d/user"' \
  --customize-hook='echo aenv > "$1/etc/hostname"' \
  --customize-hook='printf "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\taenv\n" > "$1/etc/hosts"' \
  --customize-hook=': > "$1/etc/resolv.conf"' \
  --customize-hook='printf "[global]\nbreak-system-packages = true\n" > "$1/etc/pip.conf"' \
  --customize-hook='mkdir -p "$1/agentenv" && chmod 0755 "$1/agentenv"' \
  --customize-hook='rm -rf "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* "$1"/var/log/*.log "$1"/var/log/apt/* "$1"/tmp/* "$1"/root/.cache' \
  "$SUITE" "$rootfs" "${sources[@]}" >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  aenv_die "mmdebstrap failed (full log above was $log)"
fi

# The image config keeps User empty (root): envd runs as root and starts commands as the
# sandbox's default user `user`, like E2B's base template; WorkingDir is that user's home.
config_args=(--config.workingdir /home/user --config.cmd /bin/bash --author aenv)
for e in "${IMAGE_ENV[@]}"; do config_args+=(--config.env "$e"); done
layout=$tmp/layout
aenv_image_pack "$rootfs" "$layout" "$tag" "${config_args[@]}" >"$tmp/umoci.log" 2>&1 ||
  { cat "$tmp/umoci.log" >&2 && aenv_die "umoci failed"; }
aenv_safe_rmtree "$rootfs"

elapsed_ms=$(($(aenv_now_ms) - started))
aenv_image_write_info "$layout" "$key" "$((elapsed_ms / 1000)).$(((elapsed_ms % 1000) / 100))"
aenv_image_publish "$layout" "$out"
aenv_safe_rmtree "$tmp"
trap - EXIT

printf 'base image: built %s:%s in %s (%s compressed)\n' "$out" "$tag" \
  "$(aenv_elapsed 0 "$elapsed_ms")" "$(aenv_human_bytes "$(aenv_image_size "$out")")"
