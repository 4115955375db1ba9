#!/usr/bin/env bash
# A local cluster on this machine in one command (docs/cluster.md#a-local-cluster): one `aenv scheduler`,
# three nodes (`aenv server`, each with its own home, runtime dir, internal CIDRs and resource prefix, all
# reporting heartbeats) and one `aenv gateway`, on loopback. The nodes share one snapshot repository (a
# posix_fs directory under the state dir) and the cluster's secrets, so templates, snapshots and paused
# sandboxes are usable on every node and a drained node's sandboxes resume on another, as in a real cluster.
# Prints the E2B_* environment to use.
# Usage: scripts/local-cluster.sh up | down | status | purge   (purge: down, then remove everything the nodes
# keep on the host between runs: CoW volume and netns mounts, nft tables, cgroup parents, state and runtime dirs)
# Environment: AENV_CLUSTER_NODES (default 3, at most 9), AENV_CLUSTER_PORT (gateway port, default 18000; the
# nodes take the next ones, the scheduler +90), AENV_CLUSTER_STATE (default /var/lib/aenv-cluster),
# AENV_CLUSTER_WARM (warm sandboxes per node, default 0: three nodes on one machine), AENV_CLUSTER_REDIS
# (host:port of a Redis for the scheduler's bindings; default none: bindings in the scheduler's memory, rebuilt
# from heartbeats after a restart), AENV_DEPS_PATH (CRIU and the tools dir, default /var/lib/aenv/deps as
# scripts/setup-host.sh installs them).
# Needs root, as a node does; run `npm run build` (or scripts/run-server.sh once) first.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/common.sh
. "$REPO/scripts/lib/common.sh"

NODES=${AENV_CLUSTER_NODES:-3}
PORT=${AENV_CLUSTER_PORT:-18000}
STATE=${AENV_CLUSTER_STATE:-/var/lib/aenv-cluster}
CLI=$REPO/packages/cli/dist/main.js
SCHED_PORT=$((PORT + 90))
WARM=${AENV_CLUSTER_WARM:-0}
REDIS=${AENV_CLUSTER_REDIS:-}

pidfile() { printf '%s/%s.pid\n' "$STATE" "$1"; }

alive() {
  local f
  f=$(pidfile "$1")
  [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null
}

start() { # name, log, command...
  local name=$1 log=$2
  shift 2
  "$@" >"$log" 2>&1 &
  echo $! >"$(pidfile "$name")"
}

wait_http() { # url, what
  local i
  for i in $(seq 1 1800); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$1" || true)" = 204 ]; then return 0; fi
    sleep 0.1
  done
  aenv_die "$2 did not answer $1 in time (logs in $STATE)"
}

up() {
  aenv_require_root scripts/local-cluster.sh
  [ -f "$CLI" ] || aenv_die "$CLI is missing: run npm run build first"
  [[ $NODES =~ ^[1-9]$ ]] || aenv_die "AENV_CLUSTER_NODES must be 1..9"
  alive scheduler && aenv_die "a local cluster is already running (scripts/local-cluster.sh down first)"
  mkdir -p -m 0711 "$STATE"
  local key_file=$STATE/api-key key
  [ -f "$key_file" ] || (umask 077 && printf 'e2b_%s\n' "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >"$key_file")
  key=$(head -n1 "$key_file")
  # One token seed too, so sandbox tokens validate on every node (docs/cluster.md#secrets-that-must-be-shared).
  local seed_file=$STATE/sandbox-access-token-hash-seed seed
  [ -f "$seed_file" ] || (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$seed_file" && echo >>"$seed_file")
  seed=$(head -n1 "$seed_file")
  # And one /secrets key, so a secret made on one node opens on every other (docs/cluster.md#secrets-that-must-be-shared).
  local secrets_key_file=$STATE/secrets-key secrets_key
  [ -f "$secrets_key_file" ] ||
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$secrets_key_file" && echo >>"$secrets_key_file")
  secrets_key=$(head -n1 "$secrets_key_file")
  # And one record signing secret: every node must trust what another wrote to the shared repository.
  local signing_file=$STATE/record-signing-secret signing
  [ -f "$signing_file" ] ||
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$signing_file" && echo >>"$signing_file")
  signing=$(head -n1 "$signing_file")
  local shared=$STATE/shared-repository
  mkdir -p -m 0700 "$shared"

  local nodes_json="" i id
  for i in $(seq 1 "$NODES"); do
    nodes_json+="${nodes_json:+,}{\"id\":\"lc$i\",\"endpoint\":\"http://127.0.0.1:$((PORT + i))\"}"
  done
  (umask 077 && cat >"$STATE/cluster.json" <<EOF
{
  "log_format": "json",
  "scheduler": {
    "grpc_listen_addr": "127.0.0.1:$SCHED_PORT",
    "metrics_listen_addr": "127.0.0.1:$((SCHED_PORT + 1))",
    "redis_addr": "$REDIS",
    "nodes": [$nodes_json]
  },
  "gateway": {
    "http_listen_addr": "127.0.0.1:$PORT",
    "metrics_listen_addr": "127.0.0.1:$((SCHED_PORT + 2))",
    "scheduler_addr": "127.0.0.1:$SCHED_PORT"
  }
}
EOF
  )
  aenv_log "==> scheduler on 127.0.0.1:$SCHED_PORT"
  start scheduler "$STATE/scheduler.log" node "$CLI" scheduler -config "$STATE/cluster.json"

  for i in $(seq 1 "$NODES"); do
    id=lc$i
    local home=$STATE/$id run=/run/aenv-cluster-$id
    mkdir -p -m 0711 "$home"
    mkdir -p -m 0700 "$home/secrets"
    # One key for the cluster: each node's managed key file holds it.
    (umask 077 && printf '%s\n' "$key" >"$home/secrets/api-key" &&
      printf '%s\n' "$seed" >"$home/secrets/sandbox-access-token-hash-seed" &&
      printf '%s\n' "$secrets_key" >"$home/secrets/secrets-key" &&
      printf '%s\n' "$signing" >"$home/secrets/snapshot-record-signing-key")
    (umask 077 && cat >"$home/config.toml" <<EOF
home_path = "$home"
runtime_path = "$run"
deps_path = "${AENV_DEPS_PATH:-/var/lib/aenv/deps}"
resource_prefix = "lc$i"
log_format = "json"
[network.internal]
host_interaction_cidr = "10.$((60 + 2 * i)).0.0/16"
veth_cidr = "10.$((61 + 2 * i)).0.0/16"
[pool]
warm_sandboxes = $WARM
[snapshot]
repository_backend = "posix_fs"
[backend.posix_fs]
snapshot_store = "$shared"
[cluster]
scheduler_endpoint = "http://127.0.0.1:$SCHED_PORT"
[observability.scheduler_report]
enabled = true
interval_secs = 2
[node_identity]
node_id = "$id"
EOF
    )
    aenv_log "==> node $id on 127.0.0.1:$((PORT + i))"
    start "$id" "$home/node.log" env API_ADDR="127.0.0.1:$((PORT + i))" node "$CLI" server --config "$home/config.toml"
    # One after the other: the first registers the base template in the shared repository, the others find it.
    wait_http "http://127.0.0.1:$((PORT + i))/health" "node $id"
  done

  aenv_log "==> gateway on 127.0.0.1:$PORT"
  start gateway "$STATE/gateway.log" env AENV_API_KEY="$key" node "$CLI" gateway -config "$STATE/cluster.json"
  wait_http "http://127.0.0.1:$PORT/health" gateway
  aenv_log "local cluster up ($NODES nodes); stop it with scripts/local-cluster.sh down"
  printf 'export E2B_API_URL=http://127.0.0.1:%s\n' "$PORT"
  printf 'export E2B_SANDBOX_URL=http://127.0.0.1:%s\n' "$PORT"
  printf 'export E2B_API_KEY=%s\n' "$key"
}

stop_one() { # name
  local f pid i
  f=$(pidfile "$1")
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for i in $(seq 1 300); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && aenv_die "$1 (pid $pid) did not stop; see $STATE"
  fi
  rm -f "$f"
}

down() {
  aenv_require_root scripts/local-cluster.sh
  local i key
  if [ -f "$STATE/api-key" ]; then
    key=$(head -n1 "$STATE/api-key")
    # Sandboxes first (a stopped node keeps paused ones on disk; running ones are killed here).
    for i in $(seq 1 9); do
      alive "lc$i" || continue
      { curl -s -H "X-API-Key: $key" "http://127.0.0.1:$((PORT + i))/v2/sandboxes" || true; } |
        { grep -o '"sandboxID":"[^"]*"' || true; } | cut -d'"' -f4 | while read -r id; do
          curl -s -o /dev/null -X DELETE -H "X-API-Key: $key" "http://127.0.0.1:$((PORT + i))/sandboxes/$id"
        done
    done
  fi
  stop_one gateway
  for i in $(seq 1 9); do stop_one "lc$i"; done
  stop_one scheduler
  aenv_log "local cluster stopped (state kept in $STATE)"
}

purge() {
  down
  local i id m ctrl
  for i in $(seq 1 9); do
    id=lc$i
    [ -d "$STATE/$id" ] || [ -d "/run/aenv-cluster-$id" ] || continue
    # Deepest mounts first.
    awk -v a="$STATE/$id" -v b="/run/aenv-cluster-$id" '$5 == a || index($5, a "/") == 1 || $5 == b || index($5, b "/") == 1 { print $5 }' /proc/self/mountinfo |
      awk -F/ '{ print NF, $0 }' | sort -rn | cut -d' ' -f2- | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m"
      done
    nft delete table inet "$id" 2>/dev/null || true
    for ctrl in /sys/fs/cgroup /sys/fs/cgroup/*/; do
      [ -d "$ctrl/$id" ] || continue
      find "$ctrl/$id" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true
      rmdir "$ctrl/$id" 2>/dev/null || true
    done
    rm -rf --one-file-system "${STATE:?}/$id" "/run/aenv-cluster-$id"
  done
  rm -rf --one-file-system "${STATE:?}"
  aenv_log "local cluster removed from the host"
}

status() {
  local n
  for n in scheduler gateway lc1 lc2 lc3 lc4 lc5 lc6 lc7 lc8 lc9; do
    [ -f "$(pidfile "$n")" ] || continue
    if alive "$n"; then printf '%-10s running (pid %s)\n' "$n" "$(cat "$(pidfile "$n")")"; else printf '%-10s dead\n' "$n"; fi
  done
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  purge) purge ;;
  *) aenv_die "usage: scripts/local-cluster.sh up | down | status | purge" ;;
esac
