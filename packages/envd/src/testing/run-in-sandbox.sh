#!/bin/sh
# Runs aenv-init (and so envd) as PID 1 of a fresh mount+PID namespace chrooted into ROOTFS, with the
# tools dir bind-mounted read-only at /agentenv, the way a sandbox runs it. Test helper; needs root.
#   run-in-sandbox.sh ROOTFS TOOLS_DIR [CMD ARGS...]   (env: ENVD_PORT, ENVD_HOST, ... passed through to envd)
# CMD defaults to /agentenv/bin/aenv-init (benchmarks run other programs the same way).
# A 256 KiB tmpfs is mounted at /small when the rootfs has that directory (for disk-full tests).
# Everything mounted here lives in the new mount namespace and disappears with it.
set -eu
ROOTFS=$1
TOOLS=$2
shift 2
[ $# -gt 0 ] || set -- /agentenv/bin/aenv-init
export ROOTFS TOOLS
exec unshare --mount --pid --fork --kill-child -- /bin/sh -eu -c '
  mount --make-rprivate /
  mount --bind "$TOOLS" "$ROOTFS/agentenv"
  mount -o remount,bind,ro,nosuid,nodev "$ROOTFS/agentenv"
  mount -t proc proc "$ROOTFS/proc"
  mount -t tmpfs -o mode=0755 tmpfs "$ROOTFS/run"
  if [ -d "$ROOTFS/small" ]; then mount -t tmpfs -o size=256k,mode=1777 tmpfs "$ROOTFS/small"; fi
  mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$ROOTFS/dev/pts"
  mount --bind "$ROOTFS/dev/pts/ptmx" "$ROOTFS/dev/ptmx"
  for d in null zero random urandom tty; do mount --bind "/dev/$d" "$ROOTFS/dev/$d"; done
  exec chroot "$ROOTFS" "$@"
' sh "$@"
