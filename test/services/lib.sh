# Shared settings and process bookkeeping for the test services. Source it.
# Every service's PID is recorded with its kernel start time, so stop.sh only ever signals the
# exact process start.sh launched (never a reused PID, never anything found by name).
# shellcheck shell=bash disable=SC2034 # the settings are used by the scripts that source this


STATE_DIR=${AENV_TEST_SERVICES_STATE:-/run/aenv-test-services}
DATA_DIR=${AENV_TEST_DATA:-/var/lib/aenv-test}
IMAGES_DIR=${AENV_IMAGES_DIR:-/var/cache/aenv/images}
# The Python SDK tests' venv (python-sdk.sh).
PYVENV_DIR=${AENV_TEST_PYVENV:-$DATA_DIR/pyvenv}

REGISTRY_PORT=${AENV_TEST_REGISTRY_PORT:-5000}
AUTH_REGISTRY_PORT=${AENV_TEST_AUTH_REGISTRY_PORT:-5001}
AUTH_REGISTRY_USER=aenv
AUTH_REGISTRY_PASSWORD=aenv-test-password
REDIS_PORT=${AENV_TEST_REDIS_PORT:-6379}
S3_PORT=${AENV_TEST_S3_PORT:-9000}
S3_BUCKET=aenv-test
S3_ACCESS_KEY=aenvtest
S3_SECRET_KEY=aenvtestsecret
S3_REGION=us-east-1

SERVICES=(registry auth-registry redis s3)

# Kernel start time (clock ticks since boot) of PID $1, or nothing.
svc_starttime() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  # Field 22, counted after the parenthesised command name (which may contain spaces).
  stat=${stat##*) }
  awk '{ print $20 }' <<<"$stat"
}

# Prints the recorded PID of service $1 if that exact process is still alive.
svc_pid() {
  local file=$STATE_DIR/$1.pid pid start now
  [ -f "$file" ] || return 1
  read -r pid start <"$file" || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  now=$(svc_starttime "$pid") || return 1
  [ "$now" = "$start" ] || return 1
  printf '%s\n' "$pid"
}

# True when something listens on 127.0.0.1:$1 (or on all addresses).
port_in_use() {
  [ -n "$(ss -ltnH "sport = :$1" 2>/dev/null)" ]
}

# Starts service $1 in its own session with the remaining arguments as the command; its output
# goes to $STATE_DIR/$1.log. Records "<pid> <starttime>".
svc_launch() {
  local name=$1 pid start
  shift
  # 9>&-: the service must not inherit the state-dir lock fd.
  setsid "$@" </dev/null >"$STATE_DIR/$name.log" 2>&1 9>&- &
  pid=$!
  start=$(svc_starttime "$pid") || { cat "$STATE_DIR/$name.log" >&2; aenv_die "$name exited at once"; }
  printf '%s %s\n' "$pid" "$start" >"$STATE_DIR/$name.pid.new"
  mv -f "$STATE_DIR/$name.pid.new" "$STATE_DIR/$name.pid"
}

# Waits (bounded: 200 x 0.1 s) until command "$@" succeeds while service $1 stays alive.
svc_wait_ready() {
  local name=$1 i
  shift
  for ((i = 0; i < 200; i++)); do
    svc_pid "$name" >/dev/null || { tail -n 30 "$STATE_DIR/$name.log" >&2; aenv_die "$name died while starting"; }
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  tail -n 30 "$STATE_DIR/$name.log" >&2
  aenv_die "$name did not become ready in 20 s"
}

# Stops service $1 if its recorded process is alive: TERM, then KILL after 10 s.
svc_stop() {
  local name=$1 pid i
  if pid=$(svc_pid "$name"); then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      svc_pid "$name" >/dev/null || break
      sleep 0.1
    done
    if svc_pid "$name" >/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do
        svc_pid "$name" >/dev/null || break
        sleep 0.1
      done
    fi
    printf 'stopped %s (pid %s)\n' "$name" "$pid"
  fi
  rm -f "$STATE_DIR/$name.pid"
}

# The export lines tests source (see env.sh).
services_env() {
  cat <<EOF
export AENV_TEST_REGISTRY=127.0.0.1:$REGISTRY_PORT
export AENV_TEST_AUTH_REGISTRY=127.0.0.1:$AUTH_REGISTRY_PORT
export AENV_TEST_AUTH_REGISTRY_USER=$AUTH_REGISTRY_USER
export AENV_TEST_AUTH_REGISTRY_PASSWORD=$AUTH_REGISTRY_PASSWORD
export AENV_TEST_BASE_IMAGE=127.0.0.1:$REGISTRY_PORT/aenv/base:latest
export AENV_TEST_BUSYBOX_IMAGE=127.0.0.1:$REGISTRY_PORT/aenv/busybox:latest
export AENV_TEST_AUTH_BUSYBOX_IMAGE=127.0.0.1:$AUTH_REGISTRY_PORT/aenv/busybox:latest
export AENV_TEST_BASE_LAYOUT=$IMAGES_DIR/base
export AENV_TEST_DOCKER_HUB_MIRROR=http://127.0.0.1:$REGISTRY_PORT
export AENV_TEST_PYTHON=$PYVENV_DIR/bin/python
export AENV_TEST_BUSYBOX_LAYOUT=$IMAGES_DIR/busybox
export AENV_TEST_REDIS_URL=redis://127.0.0.1:$REDIS_PORT
export AENV_TEST_S3_ENDPOINT=http://127.0.0.1:$S3_PORT
export AENV_TEST_S3_BUCKET=$S3_BUCKET
export AENV_TEST_S3_ACCESS_KEY=$S3_ACCESS_KEY
export AENV_TEST_S3_SECRET_KEY=$S3_SECRET_KEY
export AENV_TEST_S3_REGION=$S3_REGION
export AENV_TEST_S3_FORCE_PATH_STYLE=true
EOF
}
