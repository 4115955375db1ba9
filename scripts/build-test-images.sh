#!/usr/bin/env bash
# Builds the small images tests use, as OCI layouts (cached like the base image):
#   busybox:latest  busybox-static applets, root and user (1000:1000), the /agentenv mount point
# Usage: build-test-images.sh [--force] [--images-dir DIR]
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
. "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/oci-image.sh
. "$SCRIPT_DIR/lib/oci-image.sh"

usage() {
  cat <<EOF
Usage: $(basename "$0") [--force] [--images-dir DIR]

  --images-dir DIR  where the layouts go (default: /var/cache/aenv/images); busybox -> DIR/busybox
  --force           rebuild even when the cached images are current
EOF
}

images_dir=/var/cache/aenv/images
force=0
while [ $# -gt 0 ]; do
  case $1 in
    --force) force=1 && shift ;;
    --images-dir)
      [ $# -ge 2 ] && [ -n "$2" ] || aenv_die "--images-dir needs a directory"
      images_dir=$2 && shift 2
      ;;
    -h | --help) usage && exit 0 ;;
    *) usage >&2 && aenv_die "unknown argument: $1" ;;
  esac
done

aenv_require_root build-test-images.sh
case $images_dir in /*) ;; *) images_dir=$PWD/$images_dir ;; esac
mkdir -p "$images_dir"
busybox_bin=/bin/busybox
[ -x "$busybox_bin" ] || aenv_die "$busybox_bin is missing; run scripts/setup-host.sh (busybox-static)"
if LC_ALL=C readelf -l "$busybox_bin" | grep -q INTERP; then
  aenv_die "$busybox_bin is dynamically linked; install busybox-static"
fi

# Fills rootfs $1 with busybox and a minimal /etc.
make_busybox_rootfs() {
  local r=$1 d
  for d in bin sbin usr/bin usr/sbin etc proc sys dev tmp root run var/tmp mnt home/user agentenv; do
    mkdir -p "$r/$d"
  done
  cp "$busybox_bin" "$r/bin/busybox"
  chroot "$r" /bin/busybox --install -s /bin
  chmod 1777 "$r/tmp" "$r/var/tmp"
  chmod 0700 "$r/root"
  chown 1000:1000 "$r/home/user"
  printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$r/etc/passwd"
  printf 'root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n' >"$r/etc/group"
  printf 'root:*:19000:0:99999:7:::\nuser:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n' >"$r/etc/shadow"
  chmod 0640 "$r/etc/shadow"
  echo aenv >"$r/etc/hostname"
  printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$r/etc/hosts"
  : >"$r/etc/resolv.conf"
}

# Builds one image: name $1, rootfs-filler function $2, umoci config args after that.
build_image() {
  local name=$1 filler=$2 out key tmp started ms
  shift 2
  out=$images_dir/$name
  key=$(aenv_image_cache_key "$0" "$SCRIPT_DIR/lib/oci-image.sh" "$busybox_bin" -- "$name" "$*")
  exec 9>"$images_dir/.$name.lock"
  flock 9
  aenv_image_reconcile "$out"
  if [ "$force" = 0 ] && aenv_image_is_current "$out" latest "$key"; then
    printf '%s image: up to date at %s:latest\n' "$name" "$out"
    exec 9>&-
    return 0
  fi
  started=$(aenv_now_ms)
  tmp=$(aenv_image_tmpdir "$out")
  # shellcheck disable=SC2064 # expand now: remove exactly this build dir on any exit
  trap "aenv_safe_rmtree '$tmp'" EXIT
  mkdir "$tmp/rootfs"
  "$filler" "$tmp/rootfs"
  aenv_image_pack "$tmp/rootfs" "$tmp/layout" latest "$@" >"$tmp/umoci.log" 2>&1 ||
    { cat "$tmp/umoci.log" >&2 && aenv_die "umoci failed for $name"; }
  ms=$(($(aenv_now_ms) - started))
  aenv_image_write_info "$tmp/layout" "$key" "$((ms / 1000)).$(((ms % 1000) / 100))"
  aenv_image_publish "$tmp/layout" "$out"
  aenv_safe_rmtree "$tmp"
  trap - EXIT
  exec 9>&-
  printf '%s image: built %s:latest in %s (%s)\n' "$name" "$out" "$(aenv_elapsed 0 "$ms")" \
    "$(aenv_human_bytes "$(aenv_image_size "$out")")"
}

build_image busybox make_busybox_rootfs \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.cmd /bin/sh --config.workingdir / --author aenv
