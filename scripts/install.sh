#!/usr/bin/env bash
# Installs aenv on a host without an orchestrator: the built tree of this checkout under the prefix,
# a systemd unit per process (aenv-server, aenv-scheduler, aenv-gateway), the configuration under
# /etc/aenv, an environment file /etc/default/aenv and the shared secrets. Logs go to the journal.
# Idempotent: files it manages are rewritten only when they change; configuration, the environment
# file and the secrets are created once and never overwritten. docs/cluster.md#native-install.
# Usage: scripts/install.sh [options]            (scripts/install.sh --help)
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
. "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/runtime-tree.sh
. "$SCRIPT_DIR/lib/runtime-tree.sh"

ALL_COMPONENTS=(server scheduler gateway)
NODE_MIN_VERSION=20.18.1

usage() {
  cat <<EOF
Usage: $(basename "$0") [options]

  --prefix DIR          program files: DIR/lib/aenv (the tree), DIR/bin/aenv (default /opt/aenv)
  --sysconfdir DIR      configuration: DIR/aenv/*, DIR/default/aenv (default /etc)
  --unitdir DIR         systemd units (default /etc/systemd/system)
  --components LIST     comma-separated, of: ${ALL_COMPONENTS[*]} (default: all)
  --source DIR          the built checkout to install (default: this script's checkout)
  --node PATH           the node binary the units run (default: node in PATH, >= $NODE_MIN_VERSION)
  --node-home DIR       the node's home_path (default /var/lib/aenv); secrets a node already keeps
                        there are reused, so its sandboxes' tokens and signatures stay valid
  --no-host-setup       skip scripts/setup-host.sh and build-base-image.sh (the node needs both once)
  --no-activate         only write files: no user, no systemctl (for images and tests)
  --dry-run             print what would be done, change nothing (needs no root)
  --uninstall           stop and remove the units, the tree and the wrapper; keep configuration,
                        secrets and node state
  --purge               with --uninstall: also remove the configuration, the secrets and the aenv
                        user (never the node state under home_path, e.g. /var/lib/aenv)
EOF
}

prefix=/opt/aenv
sysconfdir=/etc
unitdir=/etc/systemd/system
components=("${ALL_COMPONENTS[@]}")
source_dir=$(cd "$SCRIPT_DIR/.." && pwd)
node_bin=
node_home=/var/lib/aenv
host_setup=1
activate=1
dry_run=0
uninstall=0
purge=0

need_value() { [ $# -ge 2 ] && [ -n "$2" ] || aenv_die "$1 needs a value"; }
absolute() { case $2 in /*) ;; *) aenv_die "$1 must be an absolute path, got $2" ;; esac; }

while [ $# -gt 0 ]; do
  case $1 in
    --prefix) need_value "$@" && absolute "$1" "$2" && prefix=${2%/} && shift 2 ;;
    --sysconfdir) need_value "$@" && absolute "$1" "$2" && sysconfdir=${2%/} && shift 2 ;;
    --unitdir) need_value "$@" && absolute "$1" "$2" && unitdir=${2%/} && shift 2 ;;
    --source) need_value "$@" && source_dir=$(cd "$2" && pwd) && shift 2 ;;
    --node) need_value "$@" && absolute "$1" "$2" && node_bin=$2 && shift 2 ;;
    --node-home) need_value "$@" && absolute "$1" "$2" && node_home=${2%/} && shift 2 ;;
    --components)
      need_value "$@"
      IFS=, read -r -a components <<<"$2"
      for c in "${components[@]}"; do
        [[ " ${ALL_COMPONENTS[*]} " == *" $c "* ]] || aenv_die "unknown component $c (known: ${ALL_COMPONENTS[*]})"
      done
      shift 2
      ;;
    --no-host-setup) host_setup=0 && shift ;;
    --no-activate) activate=0 && shift ;;
    --dry-run) dry_run=1 && shift ;;
    --uninstall) uninstall=1 && shift ;;
    --purge) purge=1 && shift ;;
    -h | --help) usage && exit 0 ;;
    *) usage >&2 && aenv_die "unknown argument: $1" ;;
  esac
done
[ "$purge" = 0 ] || [ "$uninstall" = 1 ] || aenv_die "--purge goes with --uninstall"
[ "$dry_run" = 1 ] || aenv_require_root install.sh

etc=$sysconfdir/aenv
envfile=$sysconfdir/default/aenv
secrets=$etc/secrets.env
tree=$prefix/lib/aenv
wrapper=$prefix/bin/aenv

has() { [[ " ${components[*]} " == *" $1 "* ]]; }
systemd_running() { [ -d /run/systemd/system ]; }
# One line per action, the same in a dry run ("would ...") and a real one.
say() { if [ "$dry_run" = 1 ]; then printf 'would %s\n' "$*"; else printf '%s\n' "$*"; fi; }

# Writes $2 to $1 with mode $3 when the content differs (atomically); says what it did.
put_file() {
  local path=$1 content=$2 mode=$3
  if [ -f "$path" ] && [ "$(cat "$path")" = "$content" ]; then
    say "keep    $path"
    [ "$dry_run" = 1 ] || chmod "$mode" "$path"
    return 0
  fi
  say "$([ -e "$path" ] && echo update || echo create)  $path"
  [ "$dry_run" = 0 ] || return 0
  mkdir -p "$(dirname "$path")"
  (umask 077 && printf '%s\n' "$content" >"$path.aenv-new")
  chmod "$mode" "$path.aenv-new"
  mv -f "$path.aenv-new" "$path"
}

# Like put_file, but an existing file is the operator's: it is never replaced.
put_file_once() {
  if [ -e "$1" ]; then
    say "keep    $1 (exists; not overwritten)"
    return 0
  fi
  put_file "$@"
}

remove_path() {
  [ -e "$1" ] || [ -L "$1" ] || return 0
  say "remove  $1"
  [ "$dry_run" = 1 ] || rm -rf -- "$1"
}

run_step() {
  say "run     $*"
  [ "$dry_run" = 1 ] || "$@"
}

version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

resolve_node() {
  [ -n "$node_bin" ] || node_bin=$(command -v node || true)
  [ -n "$node_bin" ] && [ -x "$node_bin" ] || aenv_die "no node binary (install Node.js >= $NODE_MIN_VERSION or pass --node)"
  local v
  v=$("$node_bin" --version 2>/dev/null) || aenv_die "$node_bin --version failed"
  version_ge "${v#v}" "$NODE_MIN_VERSION" || aenv_die "$node_bin is $v; aenv needs >= $NODE_MIN_VERSION"
}

# ---- generated files -------------------------------------------------------------------------------

wrapper_script() {
  cat <<EOF
#!/bin/sh
# Managed by scripts/install.sh: runs the aenv installed in $tree.
exec $node_bin $tree/packages/cli/dist/main.js "\$@"
EOF
}

env_file() {
  cat <<'EOF'
# Environment of the aenv units (aenv-server, aenv-scheduler, aenv-gateway); created once by
# scripts/install.sh and never overwritten. Secrets are in /etc/aenv/secrets.env, not here.
# Node: every AENV_* variable of docs/configuration.md; they win over /etc/aenv/node.toml.
AENV_LOG_FORMAT=compact
# AENV_LOG_LEVEL=info
# Scheduler and gateway (docs/cluster.md): LOG_LEVEL, LOG_FORMAT (auto|console|json),
# SCHEDULER_GRPC_LISTEN_ADDR, SCHEDULER_STRATEGY, SCHEDULER_REDIS_ADDR, GATEWAY_HTTP_LISTEN_ADDR,
# GATEWAY_SCHEDULER_ADDR, GATEWAY_METRICS_LISTEN_ADDR.
LOG_FORMAT=console
EOF
}

hex32() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }

# An existing node's managed secret (scripts/run-server.sh, a node started before this install):
# reusing it keeps its sandboxes' tokens and its repository's signatures valid.
managed_secret() {
  local file=$node_home/secrets/$1
  [ -f "$file" ] && head -c 300 "$file" | tr -d '\r\n'
}

secrets_file() {
  local key seed signing secrets_key
  key=$(managed_secret api-key || true)
  seed=$(managed_secret sandbox-access-token-hash-seed || true)
  signing=$(managed_secret snapshot-record-signing-key || true)
  secrets_key=$(managed_secret secrets-key || true)
  cat <<EOF
# Shared secrets of this aenv installation, read by systemd for the units (mode 0600, root).
# A cluster of several hosts needs the same values on every node and gateway: copy this file.
AENV_API_KEY=${key:-e2b_$(hex32)}
AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED=${seed:-$(hex32)}
AENV_SNAPSHOT_RECORD_SIGNING_SECRET=${signing:-$(hex32)}
AENV_SECRETS_ENCRYPTION_KEY=${secrets_key:-$(hex32)}
EOF
}

node_config() {
  cat <<EOF
# aenv node configuration (aenv-server.service); created once by scripts/install.sh. Only what
# differs from the built-in defaults is set: every key is in docs/configuration.md.
home_path = "$node_home"
runtime_path = "/run/aenv"
api_addr = "0.0.0.0:8000"

[snapshot]
# posix_fs under home_path: this host only. Several hosts share a repository with oss (S3) or a
# shared directory mounted at the same path on each (docs/cluster.md#shared-repository).
repository_backend = "posix_fs"

[cluster]
scheduler_endpoint = "http://127.0.0.1:9090"

[observability.scheduler_report]
enabled = true
interval_secs = 5
EOF
}

cluster_config() {
  local id
  id=$(hostname 2>/dev/null || echo local-node)
  cat <<EOF
{
  "log_level": "info",
  "log_format": "auto",
  "scheduler": {
    "grpc_listen_addr": "127.0.0.1:9090",
    "metrics_listen_addr": "127.0.0.1:9101",
    "strategy": "round_robin",
    "report_ttl": "30s",
    "binding_ttl": "30s",
    "redis_addr": "",
    "nodes": [{ "id": "$id", "endpoint": "http://127.0.0.1:8000" }],
    "discovery": { "mode": "static" }
  },
  "gateway": {
    "http_listen_addr": ":8080",
    "metrics_listen_addr": "127.0.0.1:9102",
    "scheduler_addr": "127.0.0.1:9090",
    "request_timeout": "30s",
    "forward_response_size": 4194304,
    "sandbox_proxy_domains": [],
    "debug_mode": false
  }
}
EOF
}

# Options shared by the scheduler and the gateway: an unprivileged user with nothing to write and
# no capability. No MemoryDenyWriteExecute: V8 compiles code at run time.
HARDENING='NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RemoveIPC=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallErrorNumber=EPERM
UMask=0077'

server_unit() {
  cat <<EOF
# Managed by scripts/install.sh; change it with \`systemctl edit aenv-server\`.
[Unit]
Description=aenv node (aenv server): the E2B-compatible API, the sandbox proxy and the sandboxes
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
# root with every capability, not the reference's aenv user with CAP_NET_ADMIN+CAP_SYS_ADMIN: runc
# runs rootful only as uid 0, CRIU needs CAP_SYS_PTRACE and CAP_CHECKPOINT_RESTORE, image layers are
# unpacked owned by the sandbox uid range (CAP_CHOWN), and cgroup, loop-device and netns files are
# root's. Sandboxes get Docker's default capability set only (docs/runtime.md).
User=root
Group=root
EnvironmentFile=-$envfile
EnvironmentFile=$secrets
ExecStart=$wrapper server --config $etc/node.toml
# SIGTERM to the node only: it pauses every running sandbox (with runc and CRIU, which must not be
# signalled meanwhile), then exits; whatever is left is killed after that. Sandboxes live in cgroups
# of their own and are never part of this unit.
KillMode=mixed
KillSignal=SIGTERM
TimeoutStopSec=300
Restart=on-failure
RestartSec=2s
# A sandbox's RLIMIT_NOFILE is the node's hard limit.
LimitNOFILE=1048576
TasksMax=infinity
# Under memory pressure the kernel kills inside sandboxes (their own limits) before the node.
OOMScoreAdjust=-500
# No mount namespace options (ProtectSystem, PrivateTmp, ...): sandbox mounts and netns files must
# be in the host's namespace, where the node finds them again after a restart.
SyslogIdentifier=aenv-server

[Install]
WantedBy=multi-user.target
EOF
}

scheduler_unit() {
  cat <<EOF
# Managed by scripts/install.sh; change it with \`systemctl edit aenv-scheduler\`.
[Unit]
Description=aenv scheduler: placement, sandbox bindings and node heartbeats (gRPC scheduler.v1)
After=network-online.target redis-server.service
Wants=network-online.target

[Service]
Type=exec
User=aenv
Group=aenv
EnvironmentFile=-$envfile
ExecStart=$wrapper scheduler -config $etc/scheduler.json
Restart=on-failure
RestartSec=2s
$HARDENING
SyslogIdentifier=aenv-scheduler

[Install]
WantedBy=multi-user.target
EOF
}

gateway_unit() {
  cat <<EOF
# Managed by scripts/install.sh; change it with \`systemctl edit aenv-gateway\`.
[Unit]
Description=aenv gateway: the cluster's HTTP entry point (E2B API and sandbox traffic)
After=network-online.target aenv-scheduler.service
Wants=network-online.target

[Service]
Type=exec
User=aenv
Group=aenv
EnvironmentFile=-$envfile
# The API key (AENV_API_KEY) it checks, the same the nodes use.
EnvironmentFile=$secrets
ExecStart=$wrapper gateway -config $etc/gateway.json
# Streams (exec output, watches) have no time bound: give open ones time to finish.
TimeoutStopSec=60
Restart=on-failure
RestartSec=2s
$HARDENING
SyslogIdentifier=aenv-gateway

[Install]
WantedBy=multi-user.target
EOF
}

# ---- install / uninstall -----------------------------------------------------------------------------

install_tree() {
  aenv_require_built_tree "$source_dir"
  say "copy    $source_dir -> $tree (runtime files, production dependencies)"
  [ "$dry_run" = 0 ] || return 0
  mkdir -p "$prefix/lib"
  local stage=$prefix/lib/.aenv.new
  rm -rf "$stage"
  aenv_copy_runtime_tree "$source_dir" "$stage"
  # Swap in one rename each way: the units never see a half-copied tree.
  rm -rf "$prefix/lib/.aenv.old"
  [ ! -e "$tree" ] || mv -T "$tree" "$prefix/lib/.aenv.old"
  mv -T "$stage" "$tree"
  rm -rf "$prefix/lib/.aenv.old"
}

ensure_user() {
  if id -u aenv >/dev/null 2>&1; then
    say "keep    user aenv"
    return 0
  fi
  run_step useradd --system --user-group --home-dir /nonexistent --no-create-home \
    --shell /usr/sbin/nologin --comment "aenv scheduler and gateway" aenv
}

units() {
  local c
  for c in "${components[@]}"; do printf 'aenv-%s.service\n' "$c"; done
}

do_install() {
  resolve_node
  install_tree
  put_file "$wrapper" "$(wrapper_script)" 0755
  put_file_once "$envfile" "$(env_file)" 0644
  put_file_once "$secrets" "$(secrets_file)" 0600
  has server && put_file_once "$etc/node.toml" "$(node_config)" 0644
  has scheduler && put_file_once "$etc/scheduler.json" "$(cluster_config)" 0644
  has gateway && put_file_once "$etc/gateway.json" "$(cluster_config)" 0644
  has server && put_file "$unitdir/aenv-server.service" "$(server_unit)" 0644
  has scheduler && put_file "$unitdir/aenv-scheduler.service" "$(scheduler_unit)" 0644
  has gateway && put_file "$unitdir/aenv-gateway.service" "$(gateway_unit)" 0644
  if has server && [ "$host_setup" = 1 ]; then
    run_step "$source_dir/scripts/setup-host.sh"
    run_step "$source_dir/scripts/build-base-image.sh"
  fi
  [ "$activate" = 1 ] || return 0
  if has scheduler || has gateway; then ensure_user; fi
  if ! systemd_running; then
    say "skip    systemctl: systemd is not running here; start the units once it is"
    return 0
  fi
  run_step systemctl daemon-reload
  local -a names
  mapfile -t names < <(units)
  run_step systemctl enable "${names[@]}"
  # restart, not start: an upgrade must run the new tree (the node pauses its sandboxes first).
  run_step systemctl restart "${names[@]}"
}

do_uninstall() {
  local -a names
  mapfile -t names < <(units)
  if [ "$activate" = 1 ] && systemd_running; then
    run_step systemctl disable --now "${names[@]}"
  fi
  local n
  for n in "${names[@]}"; do remove_path "$unitdir/$n"; done
  [ "$activate" = 0 ] || ! systemd_running || run_step systemctl daemon-reload
  if [ ${#components[@]} -eq ${#ALL_COMPONENTS[@]} ]; then
    remove_path "$wrapper"
    remove_path "$tree"
  fi
  if [ "$purge" = 1 ]; then
    has server && remove_path "$etc/node.toml"
    has scheduler && remove_path "$etc/scheduler.json"
    has gateway && remove_path "$etc/gateway.json"
    if [ ${#components[@]} -eq ${#ALL_COMPONENTS[@]} ]; then
      remove_path "$secrets"
      remove_path "$envfile"
      [ ! -d "$etc" ] || [ -n "$(ls -A "$etc")" ] || remove_path "$etc"
      if [ "$activate" = 1 ] && id -u aenv >/dev/null 2>&1; then run_step userdel aenv; fi
    fi
    say "note    node state in $node_home is kept: remove it yourself"
  fi
}

if [ "$uninstall" = 1 ]; then do_uninstall; else do_install; fi
