#!/usr/bin/env bash
# Runs the aenv Compose cluster (deploy/docker-compose.yml) on this host, as root: installs
# docker.io and docker-compose from Debian when missing, uses the Docker daemon that runs here or
# starts a private one, builds the images from a local mmdebstrap rootfs (nothing is pulled from a
# registry) and brings the cluster up.
# Usage: scripts/cluster-compose.sh up [SERVICE...] | down [--volumes] | status | build | logs [SERVICE...]
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/common.sh
. "$REPO/scripts/lib/common.sh"
# shellcheck source=lib/debian-apt.sh
. "$REPO/scripts/lib/debian-apt.sh"
# shellcheck source=lib/deps-manifest.sh
. "$REPO/scripts/lib/deps-manifest.sh"
# shellcheck source=lib/npm-deps.sh
. "$REPO/scripts/lib/npm-deps.sh"
# shellcheck source=lib/runtime-tree.sh
. "$REPO/scripts/lib/runtime-tree.sh"

COMPOSE_FILE=$REPO/deploy/docker-compose.yml
PROJECT=${AENV_COMPOSE_PROJECT:-agentenv}
STATE=${AENV_COMPOSE_STATE:-/var/lib/aenv-compose}
RUN_DIR=${AENV_COMPOSE_RUN:-/run/aenv-compose}
TAG=${AENV_IMAGE_TAG:-local}
ROOTFS_IMAGE=aenv/rootfs:bookworm
SUITE=bookworm
# What the images run: Node's own libraries (the node binary is this host's), tini as PID 1 (it
# reaps orphaned sandbox processes and forwards SIGTERM), Redis for the scheduler, the seccomp
# profile, and every Debian package a node needs on its host (config/deps_manifest.toml's runtime
# group: runc, nft, ip, conntrack, btrfs, python3 for whiteouts, gcc for the helpers a node compiles
# at its first start...), so the image cannot fall behind what a node checks for at startup.
mapfile -t NODE_DEBS < <(aenv_manifest_debs container runtime)
[ "${#NODE_DEBS[@]}" -gt 0 ] || aenv_die "config/deps_manifest.toml lists no runtime packages"
ROOTFS_PACKAGES=(
  tini libstdc++6 redis-server redis-tools mount tar procps kmod golang-github-containers-common
  "${NODE_DEBS[@]}"
)
HOST_PACKAGES=(docker.io docker-compose mmdebstrap patchelf)
WAIT_SECS=${AENV_COMPOSE_WAIT_SECS:-900}

usage() {
  cat <<EOF
Usage: $(basename "$0") COMMAND

  up [SERVICE...]    build what is missing or stale, then start the cluster (or only SERVICE...)
                     and wait until every started service is healthy or running
  down [--volumes]   stop and remove the containers (--volumes: also the node homes, the snapshot
                     repository and the secrets); stops the Docker daemon this script started
  status             the daemon, every service's state and the gateway's /health
  build              only build the images
  logs [SERVICE...]  the last log lines of the services
  smoke              the e2b SDK through the gateway: sandboxes on every node, exec, files, list,
                     pause/connect, fork (scripts/cluster-smoke.mjs; kills what it made)

The gateway listens on 127.0.0.1:\${AENV_GATEWAY_PORT:-8000}. The API key is in the agentenv-auth
volume: docker run --rm -v ${PROJECT}_agentenv-auth:/s aenv/aenv:$TAG ... or \`$(basename "$0") status\`.
Without a Docker daemon on this host, one is started with its own socket ($RUN_DIR/docker.sock),
state ($STATE/docker), no iptables rules and no default bridge, and DOCKER_HOST points at it.
EOF
}

# ---- Docker daemon --------------------------------------------------------------------------------

DAEMON_PIDFILE=$RUN_DIR/dockerd.pid
# The private daemon's containers get their cgroups under this name, not Docker's default `docker`
# (which a host daemon may use), so `down` can remove it.
DAEMON_CGROUP=aenv-compose
OWN_SOCKET=unix://$RUN_DIR/docker.sock

proc_start_time() { awk '{ print $22 }' "/proc/$1/stat" 2>/dev/null; }

# The dockerd this script started, if it still runs (PID and kernel start time both match).
own_daemon_pid() {
  local pid start
  [ -f "$DAEMON_PIDFILE" ] || return 1
  read -r pid start <"$DAEMON_PIDFILE" || return 1
  [ -n "$pid" ] && [ "$(proc_start_time "$pid")" = "$start" ] || return 1
  printf '%s\n' "$pid"
}

docker_ok() { docker info >/dev/null 2>&1; }

# Points DOCKER_HOST at a working daemon: the one this script started, else the host's own, else a
# new private one. Prints which.
ensure_daemon() {
  if own_daemon_pid >/dev/null; then
    export DOCKER_HOST=$OWN_SOCKET
    docker_ok && return 0
  fi
  if [ -z "${DOCKER_HOST:-}" ] && docker_ok; then
    aenv_log "using the Docker daemon that runs on this host"
    [ -z "$(missing_caps)" ] ||
      aenv_log "warning: this host lacks capabilities $(missing_caps | paste -sd, -): privileged nodes will not start under that daemon"
    return 0
  fi
  start_daemon
}

start_daemon() {
  mkdir -p "$RUN_DIR" "$STATE/docker"
  chmod 0700 "$RUN_DIR" "$STATE"
  local log=$STATE/dockerd.log pid deadline
  aenv_log "starting a private Docker daemon ($OWN_SOCKET, log $log)"
  # --iptables=false: no NAT, no FORWARD policy change, nothing in the host's firewall (aenv's own
  # nftables rules and other nodes on this host stay as they are); published ports go through
  # docker-proxy. --bridge=none: only the networks the compose file declares exist.
  local -a runtime=()
  local missing
  missing=$(missing_caps | paste -sd, -)
  if [ -n "$missing" ]; then
    aenv_log "this host's capability bounding set lacks $missing: containers run through a runc wrapper that drops it"
    runtime=(--add-runtime "aenv-runc=$(write_runc_wrapper "$missing")" --default-runtime aenv-runc)
  fi
  setsid dockerd \
    --host "$OWN_SOCKET" "${runtime[@]}" \
    --data-root "$STATE/docker" \
    --exec-root "$RUN_DIR/exec" \
    --pidfile "$RUN_DIR/dockerd.own.pid" \
    --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false --bridge=none \
    --containerd-namespace aenv-compose --containerd-plugins-namespace aenv-compose-plugins \
    --cgroup-parent "$DAEMON_CGROUP" \
    >>"$log" 2>&1 </dev/null &
  pid=$!
  printf '%s %s\n' "$pid" "$(proc_start_time "$pid")" >"$DAEMON_PIDFILE"
  export DOCKER_HOST=$OWN_SOCKET
  deadline=$((SECONDS + 60))
  until docker_ok; do
    kill -0 "$pid" 2>/dev/null || { tail -n 30 "$log" >&2 && aenv_die "dockerd exited (log: $log)"; }
    [ $SECONDS -lt $deadline ] || { tail -n 30 "$log" >&2 && aenv_die "dockerd did not answer within 60 s"; }
    sleep 1
  done
}

stop_own_daemon() {
  local pid deadline
  pid=$(own_daemon_pid) || return 0
  aenv_log "stopping the Docker daemon this script started (pid $pid)"
  kill -TERM "$pid"
  deadline=$((SECONDS + 60))
  while [ "$(proc_start_time "$pid")" != "" ] && [ $SECONDS -lt $deadline ]; do sleep 1; done
  [ "$(proc_start_time "$pid")" = "" ] || aenv_die "dockerd (pid $pid) did not stop within 60 s"
  rm -f "$DAEMON_PIDFILE"
}

compose() { docker-compose -p "$PROJECT" -f "$COMPOSE_FILE" "$@"; }

CAP_NAMES=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE
  NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT
  SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE
  AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ
  PERFMON BPF CHECKPOINT_RESTORE)

# Capabilities this kernel has that this host's bounding set lacks (e.g. a host that is itself a
# container): a privileged container asks for all of them and runc fails ("unable to apply caps").
missing_caps() {
  local bnd last i
  bnd=$((16#$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)))
  last=$(cat /proc/sys/kernel/cap_last_cap)
  for ((i = 0; i <= last && i < ${#CAP_NAMES[@]}; i++)); do
    (((bnd >> i) & 1)) || printf '%s\n' "${CAP_NAMES[$i]}"
  done
}

# On such a host (a private daemon only), containers run through a runc wrapper that removes the
# missing capabilities from their capability sets: `privileged` then means every capability the host
# has, and the compose file stays as it is.
write_runc_wrapper() {
  local missing=$1 wrapper=$STATE/bin/runc-bounded runc
  runc=$(command -v runc)
  mkdir -p "$STATE/bin"
  cat >"$wrapper.new" <<EOF
#!/bin/sh
# Written by scripts/cluster-compose.sh: this host's capability bounding set lacks $missing.
exec python3 - "\$@" <<'PY'
import json, os, sys
drop = {"CAP_" + c for c in "$missing".split(",")}
args = sys.argv[1:]
def strip(path):
    with open(path) as f: spec = json.load(f)
    caps = (spec.get("process") or spec).get("capabilities") or {}
    for k, v in caps.items(): caps[k] = [c for c in v if c not in drop]
    with open(path, "w") as f: json.dump(spec, f)
for i, a in enumerate(args):
    if a in ("--bundle", "-b") and i + 1 < len(args): strip(os.path.join(args[i + 1], "config.json"))
    elif a.startswith("--bundle="): strip(os.path.join(a.split("=", 1)[1], "config.json"))
    elif a in ("--process", "-p") and i + 1 < len(args): strip(args[i + 1])
    elif a.startswith("--process="): strip(a.split("=", 1)[1])
os.execv("$runc", ["runc"] + args)
PY
EOF
  chmod 0755 "$wrapper.new"
  mv -f "$wrapper.new" "$wrapper"
  printf '%s\n' "$wrapper"
}

# ---- images ----------------------------------------------------------------------------------------

image_label() { docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }

# The Debian rootfs both images start from, imported into Docker (cached by its package list).
build_rootfs() {
  local key tmp mirror security log
  key=$(printf '%s\n' "$SUITE" "${ROOTFS_PACKAGES[*]}" | sha256sum | cut -c1-16)
  if [ "$(image_label "$ROOTFS_IMAGE" aenv.rootfs.key)" = "$key" ]; then
    aenv_log "rootfs: $ROOTFS_IMAGE is current"
    return 0
  fi
  mirror=$(aenv_debian_mirror)
  security=$(aenv_debian_security_mirror)
  local -a sources=("deb $mirror $SUITE main" "deb $mirror $SUITE-updates main")
  [ -z "$security" ] || sources+=("deb $security $SUITE-security main")
  mkdir -p "$STATE/debs"
  tmp=$(mktemp -d "$STATE/rootfs.XXXXXX")
  # shellcheck disable=SC2064 # expand now: remove exactly this build dir
  trap "aenv_safe_rmtree '$tmp'" EXIT
  log=$tmp/mmdebstrap.log
  aenv_log "rootfs: mmdebstrap $SUITE (${#ROOTFS_PACKAGES[@]} packages) ..."
  if ! mmdebstrap --variant=minbase --mode=root --format=directory --skip=essential/unlink \
    --include="$(
      IFS=,
      echo "${ROOTFS_PACKAGES[*]}"
    )" \
    --dpkgopt='force-unsafe-io' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
    --setup-hook="sync-in '$STATE/debs' /var/cache/apt/archives/" \
    --customize-hook="find '$STATE/debs' -maxdepth 1 -name '*.deb' -delete" \
    --customize-hook="sync-out /var/cache/apt/archives '$STATE/debs'" \
    --customize-hook='rm -rf "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* "$1"/var/log/*.log "$1"/var/log/apt/* "$1"/tmp/*' \
    "$SUITE" "$tmp/rootfs" "${sources[@]}" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    aenv_die "mmdebstrap failed"
  fi
  tar -C "$tmp/rootfs" --numeric-owner -c . |
    docker import --change "LABEL aenv.rootfs.key=$key" --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' - "$ROOTFS_IMAGE" >/dev/null
  aenv_safe_rmtree "$tmp"
  trap - EXIT
  aenv_log "rootfs: imported $ROOTFS_IMAGE"
}

# The built aenv tree the images carry (scripts/lib/runtime-tree.sh), the node binary and the entrypoint.
stage_app() {
  local ctx=$1
  mkdir -p "$ctx/bin"
  aenv_require_built_tree "$REPO"
  aenv_copy_runtime_tree "$REPO" "$ctx/app"
  cp -a "$(command -v node)" "$ctx/bin/node"
  cp -a "$REPO/deploy/docker/aenv-entrypoint" "$ctx/bin/aenv-entrypoint"
  cp -a "$REPO/deploy/k8s/generate-secrets.sh" "$ctx/bin/aenv-generate-secrets"
}

# CRIU from this host's prefix (scripts/setup-host.sh), moved to /opt/aenv/criu: the loader and
# RPATH are absolute, so they are patched for the new place; its symlinks are relative already.
stage_criu() {
  local ctx=$1 src version dest loader
  src=$(realpath "${AENV_DEPS_PATH:-/var/lib/aenv/deps}/criu/current")
  version=$(basename "$src")
  dest=$ctx/criu/$version
  mkdir -p "$ctx/criu"
  cp -a "$src" "$dest"
  loader=$(cd "$dest" && find . -name 'ld-linux-x86-64.so.2' -print -quit)
  [ -n "$loader" ] || aenv_die "no loader in the CRIU prefix $src"
  patchelf --set-interpreter "/opt/aenv/criu/$version/${loader#./}" --force-rpath \
    --set-rpath "/opt/aenv/criu/$version/usr/lib/x86_64-linux-gnu:/opt/aenv/criu/$version/lib/x86_64-linux-gnu" \
    "$dest/usr/sbin/criu"
  ln -sfn "$version" "$ctx/criu/current"
}

# The read-only tools dir every sandbox mounts at /agentenv (envd, a node whose loader and libraries
# live inside it, aenv-init), built here with the host's gcc like a node would at its first start.
stage_tools() {
  local ctx=$1 dir
  dir=$(cd "$REPO" && node --input-type=module -e "
    const { ensureToolsDir } = await import('./packages/node/dist/index.js');
    const t = await ensureToolsDir({ depsPath: process.argv[1] });
    console.log(t.dir);" "$ctx/deps") || aenv_die "building the tools dir failed"
  mv "$dir" "$ctx/tools"
  rm -rf "$ctx/deps"
}

build_images() {
  local ctx
  aenv_require_root "$(basename "$0") build"
  printf '==> host setup (CRIU prefix) and the base image\n'
  "$REPO/scripts/setup-host.sh" >/dev/null
  "$REPO/scripts/build-base-image.sh"
  printf '==> npm dependencies and build\n'
  aenv_npm_ci_if_needed "$REPO"
  (cd "$REPO" && npm run build --silent >/dev/null)
  printf '==> images\n'
  build_rootfs
  local key
  key=$(images_key)
  if [ "$(image_label "aenv/aenv-node:$TAG" aenv.build.key)" = "$key" ] &&
    [ "$(image_label "aenv/aenv:$TAG" aenv.build.key)" = "$key" ]; then
    aenv_log "images: aenv/aenv:$TAG and aenv/aenv-node:$TAG are current"
    return 0
  fi
  ctx=$(mktemp -d "$STATE/context.XXXXXX")
  # shellcheck disable=SC2064 # expand now: remove exactly this context
  trap "rm -rf '$ctx'" EXIT
  stage_app "$ctx"
  stage_criu "$ctx"
  stage_tools "$ctx"
  mkdir -p "$ctx/images"
  cp -a /var/cache/aenv/images/base "$ctx/images/base"
  cp "$REPO/deploy/docker/aenv.Dockerfile" "$REPO/deploy/docker/node.Dockerfile" "$ctx/"
  # The classic builder: FROM a local image never contacts a registry (no --pull).
  DOCKER_BUILDKIT=0 docker build -q -f "$ctx/aenv.Dockerfile" --build-arg "ROOTFS=$ROOTFS_IMAGE" \
    --label "aenv.build.key=$key" -t "aenv/aenv:$TAG" "$ctx" >/dev/null 2>"$ctx/build.log" ||
    { cat "$ctx/build.log" >&2 && aenv_die "docker build of aenv/aenv:$TAG failed"; }
  DOCKER_BUILDKIT=0 docker build -q -f "$ctx/node.Dockerfile" --build-arg "CONTROL=aenv/aenv:$TAG" \
    --label "aenv.build.key=$key" -t "aenv/aenv-node:$TAG" "$ctx" >/dev/null 2>"$ctx/build.log" ||
    { cat "$ctx/build.log" >&2 && aenv_die "docker build of aenv/aenv-node:$TAG failed"; }
  rm -rf "$ctx"
  trap - EXIT
  docker image ls --filter 'reference=aenv/*' --format '  {{.Repository}}:{{.Tag}}  {{.Size}}'
}

# What the images are made of: the checkout's files (tracked and untracked, by content, so a commit
# alone changes nothing; only what goes into them), the rootfs, the base image, CRIU and node.
# Unchanged → not rebuilt.
images_key() {
  {
    (cd "$REPO" && git ls-files --cached --others --exclude-standard -z -- package.json package-lock.json \
      packages config scripts/setup-host.sh scripts/build-base-image.sh scripts/lib deploy/docker \
      deploy/k8s/generate-secrets.sh 2>/dev/null |
      xargs -0r sha256sum 2>/dev/null) || true
    image_label "$ROOTFS_IMAGE" aenv.rootfs.key
    cat /var/cache/aenv/images/base/aenv-build.json 2>/dev/null
    realpath "${AENV_DEPS_PATH:-/var/lib/aenv/deps}/criu/current"
    node --version
  } | sha256sum | cut -c1-16
}

# ---- commands ---------------------------------------------------------------------------------------

# Waits until each service is healthy (when it has a health check) or running; fails naming the ones
# that exited or did not get there in time.
wait_healthy() {
  local deadline=$((SECONDS + WAIT_SECS)) pending svc id state health restarts
  local -a services=("$@")
  [ ${#services[@]} -gt 0 ] || mapfile -t services < <(compose config --services | grep -vx secrets)
  while :; do
    pending=()
    for svc in "${services[@]}"; do
      id=$(compose ps -q "$svc" 2>/dev/null | head -n1)
      state=$([ -n "$id" ] && docker inspect --format '{{.State.Status}}' "$id" 2>/dev/null || echo missing)
      restarts=$([ -n "$id" ] && docker inspect --format '{{.RestartCount}}' "$id" 2>/dev/null || echo 0)
      if [ "$restarts" -ge 3 ]; then
        compose logs --tail 30 "$svc" >&2 || true
        aenv_die "service $svc keeps exiting ($restarts restarts)"
      fi
      health=$([ -n "$id" ] && docker inspect --format '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$id" 2>/dev/null || true)
      case "$state/$health" in
        running/healthy | running/) ;;
        exited/* | dead/* | missing/*)
          compose logs --tail 30 "$svc" >&2 || true
          aenv_die "service $svc is $state"
          ;;
        *) pending+=("$svc:$state${health:+/$health}") ;;
      esac
    done
    [ ${#pending[@]} -gt 0 ] || return 0
    [ $SECONDS -lt $deadline ] || aenv_die "not ready after ${WAIT_SECS}s: ${pending[*]}"
    sleep 3
  done
}

# Waits (bounded) for a one-shot service to exit 0.
wait_exited() {
  local deadline=$((SECONDS + 120)) id state
  id=$(compose ps -q "$1")
  while state=$(docker inspect --format '{{.State.Status}} {{.State.ExitCode}}' "$id"); [ "${state% *}" != exited ]; do
    [ $SECONDS -lt $deadline ] || aenv_die "service $1 did not finish within 120 s"
    sleep 1
  done
  [ "${state#* }" = 0 ] || { compose logs "$1" >&2 && aenv_die "service $1 failed (exit ${state#* })"; }
}

cmd_up() {
  aenv_require_root "$(basename "$0") up"
  aenv_ensure_debs "${HOST_PACKAGES[@]}" >/dev/null
  ensure_daemon
  build_images
  printf '==> compose up %s\n' "$*"
  # The secrets first (the others wait for them to complete), then every network and container
  # without starting them, so the bridges are sealed before anything on them runs.
  compose up -d --no-build secrets
  wait_exited secrets
  compose up --no-start --no-build
  seal_bridges
  compose up -d --no-build "$@"
  wait_healthy "$@"
  cmd_status
}

# The compose networks' bridges (named in deploy/docker-compose.yml).
BRIDGES=(aenv-cluster aenv-edge)

# The host forwards nothing that arrives from the cluster's bridges: whatever route a container has,
# its traffic (and its sandboxes') ends at this host. Docker's internal network alone relies on
# iptables rules, which a private daemon does not install. Published ports go through docker-proxy,
# which needs no forwarding.
seal_bridges() {
  local br
  for br in "${BRIDGES[@]}"; do
    [ -d "/proc/sys/net/ipv4/conf/$br" ] || aenv_die "bridge $br of the compose networks does not exist"
    echo 0 >"/proc/sys/net/ipv4/conf/$br/forwarding"
    [ ! -e "/proc/sys/net/ipv6/conf/$br/disable_ipv6" ] || echo 1 >"/proc/sys/net/ipv6/conf/$br/disable_ipv6"
    [ "$(cat "/proc/sys/net/ipv4/conf/$br/forwarding")" = 0 ] || aenv_die "could not turn forwarding off on $br"
  done
}

# The nodes' AENV_RESOURCE_PREFIXes (deploy/docker-compose.yml): they mount the host's cgroup tree
# and make their sandboxes' parent cgroups there, under these names.
NODE_PREFIXES=(aenva aenvb)

# Removes the named cgroups of every hierarchy mounted on this host, once nothing runs in them
# (rmdir refuses a cgroup with processes, which is then left, and named).
remove_cgroups() {
  local name mnt dir
  local -a left=()
  for name in "$@"; do
    while read -r mnt; do
      dir=$mnt/$name
      [ -d "$dir" ] || continue
      find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ ! -d "$dir" ] || left+=("$dir")
    done < <(awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts)
  done
  [ ${#left[@]} -eq 0 ] || aenv_log "cgroups still in use, left in place: ${left[*]}"
}

cmd_down() {
  aenv_require_root "$(basename "$0") down"
  local volumes=()
  [ "${1:-}" != --volumes ] || volumes=(--volumes)
  if own_daemon_pid >/dev/null || { [ -z "${DOCKER_HOST:-}" ] && docker_ok; }; then
    own_daemon_pid >/dev/null && export DOCKER_HOST=$OWN_SOCKET
    compose down --remove-orphans "${volumes[@]}"
  fi
  stop_own_daemon
  remove_cgroups "${NODE_PREFIXES[@]}" "$DAEMON_CGROUP"
}

cmd_status() {
  if own_daemon_pid >/dev/null; then
    export DOCKER_HOST=$OWN_SOCKET
    printf 'daemon: private (pid %s, DOCKER_HOST=%s)\n' "$(own_daemon_pid)" "$OWN_SOCKET"
  elif [ -z "${DOCKER_HOST:-}" ] && docker_ok; then
    printf 'daemon: the host'"'"'s\n'
  else
    printf 'daemon: none running\n'
    return 0
  fi
  compose ps
  local br code
  for br in "${BRIDGES[@]}"; do
    [ -d "/proc/sys/net/ipv4/conf/$br" ] &&
      printf 'bridge %s: forwarding %s\n' "$br" "$(cat "/proc/sys/net/ipv4/conf/$br/forwarding")"
  done
  code=$(node -e "fetch('http://127.0.0.1:${AENV_GATEWAY_PORT:-8000}/health').then((r) => console.log(r.status), () => console.log('unreachable'))")
  printf 'gateway http://127.0.0.1:%s/health: %s\n' "${AENV_GATEWAY_PORT:-8000}" "$code"
}

# The e2b SDK against the running cluster's gateway (scripts/cluster-smoke.mjs): create on every node, exec,
# files, the merged list, pause/connect, fork; it kills what it made.
cmd_smoke() {
  ensure_daemon
  local key
  key=$(docker run --rm -v "${PROJECT}_agentenv-auth:/s:ro" --entrypoint cat "aenv/aenv:$TAG" /s/api-key) ||
    aenv_die "cannot read the API key from ${PROJECT}_agentenv-auth (is the cluster up?)"
  local url=http://127.0.0.1:${AENV_GATEWAY_PORT:-8000}
  E2B_API_URL=$url E2B_SANDBOX_URL=$url E2B_API_KEY=$key node "$REPO/scripts/cluster-smoke.mjs" "$@"
}

main() {
  [ $# -gt 0 ] || { usage >&2 && exit 2; }
  local cmd=$1
  shift
  cd "$REPO"
  case $cmd in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status ;;
    build)
      aenv_ensure_debs "${HOST_PACKAGES[@]}" >/dev/null
      ensure_daemon
      build_images
      ;;
    logs)
      ensure_daemon
      compose logs --tail 50 "$@"
      ;;
    smoke) cmd_smoke "$@" ;;
    -h | --help) usage ;;
    *) usage >&2 && aenv_die "unknown command: $cmd" ;;
  esac
}

main "$@"
