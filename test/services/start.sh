#!/usr/bin/env bash
# Starts the services aenv's tests use, all on loopback (idempotent: running ones are kept):
#   registry       Debian docker-registry, 127.0.0.1:5000, no auth; gets aenv/base and aenv/busybox
#   auth-registry  Debian docker-registry, 127.0.0.1:5001, htpasswd (basic) auth; gets aenv/busybox
#   redis          redis-server, 127.0.0.1:6379, no persistence
#   s3             moto (Debian trixie python3-moto) S3 server, 127.0.0.1:9000, bucket aenv-test
# aenv/base is also pushed as library/ubuntu:22.04 and e2bdev/base:latest, so the registry stands in for Docker
# Hub (tests configure it as the docker.io mirror). Then python-sdk.sh makes the Python SDK tests' venv.
# PIDs and logs: $AENV_TEST_SERVICES_STATE (/run/aenv-test-services); data: $AENV_TEST_DATA
# (/var/lib/aenv-test). Ports can be moved with AENV_TEST_{REGISTRY,AUTH_REGISTRY,REDIS,S3}_PORT.
# Usage: start.sh [--no-push]     Then: eval "$(test/services/env.sh)"
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/common.sh
. "$HERE/../../scripts/lib/common.sh"
# shellcheck source=../../scripts/lib/debian-apt.sh
. "$HERE/../../scripts/lib/debian-apt.sh"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

# The services outlive this script: they must not keep open what its caller holds (above all the fd of
# `flock /tmp/aenv-roottests.lock …`, which a service would hold, and so the lock, until it is stopped).
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if [ "$fd" -gt 2 ] 2>/dev/null && [ "$(readlink "/proc/$$/fd/$fd")" = "$(readlink -f /tmp/aenv-roottests.lock)" ]; then
    eval "exec $fd>&-"
  fi
done

push=1
for arg in "$@"; do
  case $arg in
    --no-push) push=0 ;;
    -h | --help) sed -n '2,10p' "$0" && exit 0 ;;
    *) aenv_die "unknown argument: $arg" ;;
  esac
done
aenv_require_root test/services/start.sh

# moto's runtime dependencies from bookworm; moto itself comes from trixie (bookworm has none).
DEPS=(
  docker-registry redis-server redis-tools skopeo apache2-utils curl jq iproute2
  python3 python3-boto3 python3-botocore python3-flask python3-flask-cors python3-werkzeug
  python3-responses python3-xmltodict python3-jinja2 python3-cryptography python3-dateutil
  python3-requests python3-yaml
)
installed=$(aenv_ensure_debs "${DEPS[@]}")
[ -z "$installed" ] || aenv_log "installed: $installed"

# Debian's interpreter, not whatever python3 comes first on PATH: the apt-installed packages
# above are what moto is checked against.
PY=/usr/bin/python3
[ -x "$PY" ] || aenv_die "$PY is missing (python3 package)"

mkdir -p "$STATE_DIR" "$DATA_DIR"
chmod 0755 "$STATE_DIR"
exec 9>"$STATE_DIR/.lock"
flock 9

# Unpacks trixie's python3-moto (pure Python) into $DATA_DIR/moto/<version>; prints its
# site-packages dir.
ensure_moto() {
  local root=$DATA_DIR/moto version stage deb site
  if [ -f "$root/current/.complete" ]; then
    printf '%s\n' "$root/current/usr/lib/python3/dist-packages"
    return 0
  fi
  aenv_papt_init "$root/apt" trixie
  aenv_papt_update "$root/apt"
  deb=$(aenv_papt_download "$root/apt" python3-moto)
  version=$(dpkg-deb -f "$deb" Version)
  stage=$(mktemp -d "$root/.stage.XXXXXX")
  dpkg-deb -x "$deb" "$stage"
  site=$stage/usr/lib/python3/dist-packages
  PYTHONPATH=$site "$PY" -s -c 'import moto.server' ||
    { rm -rf "$stage" && aenv_die "moto $version does not import with this host's python3 packages"; }
  touch "$stage/.complete"
  rm -rf "${root:?}/$version"
  mv -T "$stage" "$root/$version"
  ln -sfn "$version" "$root/.current.new"
  mv -Tf "$root/.current.new" "$root/current"
  printf '%s\n' "$root/current/usr/lib/python3/dist-packages"
}

# Writes a docker-registry config derived from Debian's default: our address and storage,
# the default `auth:` section removed, optionally our htpasswd auth put in its place.
write_registry_config() {
  local out=$1 addr=$2 storage=$3 htpasswd=${4:-}
  local default=/etc/docker/registry/config.yml
  [ -f "$default" ] || aenv_die "$default is missing (docker-registry package)"
  awk -v addr="$addr" -v storage="$storage" '
    /^[^ #]/ { skip = ($1 == "auth:") }
    skip { next }
    /^  addr:/ && section == "http" { print "  addr: " addr; next }
    /^    rootdirectory:/ { print "    rootdirectory: " storage; next }
    /^[^ #]/ { section = $1; sub(/:$/, "", section) }
    { print }
  ' "$default" >"$out.new"
  if [ -n "$htpasswd" ]; then
    printf 'auth:\n  htpasswd:\n    realm: aenv-test\n    path: %s\n' "$htpasswd" >>"$out.new"
  fi
  grep -q "addr: $addr" "$out.new" && grep -q "rootdirectory: $storage" "$out.new" ||
    aenv_die "could not derive a registry config from $default"
  mv -f "$out.new" "$out"
}

http_code() { curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1"; }
registry_ready() { [ "$(http_code "http://127.0.0.1:$1/v2/")" = "$2" ]; }
redis_ready() { [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping)" = PONG ]; }
s3_ready() { [ "$(http_code "http://127.0.0.1:$S3_PORT/")" = 200 ]; }

# Refuses to start service $1 on port $2 when something that is not ours listens there.
claim_port() {
  if port_in_use "$2"; then
    ss -ltnpH "sport = :$2" >&2 || true
    aenv_die "port $2 for $1 is taken by another process (move it with the AENV_TEST_*_PORT variables)"
  fi
}

s3() {
  curl -sS --fail-with-body --max-time 10 --aws-sigv4 "aws:amz:$S3_REGION:s3" \
    --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" "$@"
}

summary=()

# --- registry (no auth) ---
if svc_pid registry >/dev/null; then
  summary+=("registry       127.0.0.1:$REGISTRY_PORT (already running)")
else
  claim_port registry "$REGISTRY_PORT"
  mkdir -p "$DATA_DIR/registry"
  write_registry_config "$STATE_DIR/registry.yml" "127.0.0.1:$REGISTRY_PORT" "$DATA_DIR/registry"
  svc_launch registry docker-registry serve "$STATE_DIR/registry.yml"
  svc_wait_ready registry registry_ready "$REGISTRY_PORT" 200
  summary+=("registry       127.0.0.1:$REGISTRY_PORT")
fi

# --- registry with htpasswd auth ---
if svc_pid auth-registry >/dev/null; then
  summary+=("auth-registry  127.0.0.1:$AUTH_REGISTRY_PORT (already running)")
else
  claim_port auth-registry "$AUTH_REGISTRY_PORT"
  mkdir -p "$DATA_DIR/auth-registry" "$DATA_DIR/auth-registry-htpasswd"
  htpasswd -Bbn "$AUTH_REGISTRY_USER" "$AUTH_REGISTRY_PASSWORD" >"$DATA_DIR/auth-registry-htpasswd/htpasswd" 2>/dev/null
  write_registry_config "$STATE_DIR/auth-registry.yml" "127.0.0.1:$AUTH_REGISTRY_PORT" \
    "$DATA_DIR/auth-registry" "$DATA_DIR/auth-registry-htpasswd/htpasswd"
  svc_launch auth-registry docker-registry serve "$STATE_DIR/auth-registry.yml"
  svc_wait_ready auth-registry registry_ready "$AUTH_REGISTRY_PORT" 401
  summary+=("auth-registry  127.0.0.1:$AUTH_REGISTRY_PORT (user $AUTH_REGISTRY_USER)")
fi

# --- redis ---
if svc_pid redis >/dev/null; then
  summary+=("redis          127.0.0.1:$REDIS_PORT (already running)")
else
  claim_port redis "$REDIS_PORT"
  cat >"$STATE_DIR/redis.conf" <<EOF
bind 127.0.0.1
protected-mode yes
port $REDIS_PORT
daemonize no
save ""
appendonly no
dir $STATE_DIR
logfile ""
databases 16
EOF
  svc_launch redis redis-server "$STATE_DIR/redis.conf"
  svc_wait_ready redis redis_ready
  summary+=("redis          127.0.0.1:$REDIS_PORT")
fi

# --- S3 (moto) ---
if svc_pid s3 >/dev/null; then
  summary+=("s3             127.0.0.1:$S3_PORT (already running)")
else
  claim_port s3 "$S3_PORT"
  moto_site=$(ensure_moto)
  svc_launch s3 env -u PYTHONHOME PYTHONPATH="$moto_site" "$PY" -s -m moto.server -H 127.0.0.1 -p "$S3_PORT"
  svc_wait_ready s3 s3_ready
  # Bucket, then a write/read/list round trip through the S3 API.
  s3 -X PUT "http://127.0.0.1:$S3_PORT/$S3_BUCKET" >/dev/null
  probe="aenv-start-probe-$$"
  s3 -X PUT -H 'Content-Type: application/octet-stream' --data-binary "$probe" "http://127.0.0.1:$S3_PORT/$S3_BUCKET/.probe" >/dev/null
  [ "$(s3 "http://127.0.0.1:$S3_PORT/$S3_BUCKET/.probe")" = "$probe" ] || aenv_die "S3 read-back failed"
  s3 "http://127.0.0.1:$S3_PORT/$S3_BUCKET?list-type=2&prefix=.probe" | grep -q '<Key>.probe</Key>' ||
    aenv_die "S3 ListObjectsV2 did not list the probe object"
  s3 -X DELETE "http://127.0.0.1:$S3_PORT/$S3_BUCKET/.probe" >/dev/null
  moto_version=$(PYTHONPATH=$moto_site "$PY" -s -c 'import moto; print(moto.__version__)')
  summary+=("s3             127.0.0.1:$S3_PORT (moto $moto_version, bucket $S3_BUCKET)")
fi

services_env >"$STATE_DIR/services.env"

# --- images ---
push_image() {
  local layout=$1 dest=$2
  shift 2
  skopeo copy --quiet --dest-tls-verify=false "$@" "oci:$layout:latest" "docker://$dest" >/dev/null
}
if [ "$push" = 1 ]; then
  for name in base busybox; do
    layout=$IMAGES_DIR/$name
    if [ ! -f "$layout/index.json" ]; then
      aenv_log "warning: $layout is not built (scripts/build-$([ $name = base ] && echo base-image || echo test-images).sh); not pushed"
      continue
    fi
    t0=$(aenv_now_ms)
    push_image "$layout" "127.0.0.1:$REGISTRY_PORT/aenv/$name:latest"
    summary+=("pushed         127.0.0.1:$REGISTRY_PORT/aenv/$name:latest in $(aenv_elapsed "$t0" "$(aenv_now_ms)")")
    if [ "$name" = base ]; then
      # Docker Hub names, for templates that name them (library/ is where Hub keeps single-name images).
      for hub_name in library/ubuntu:22.04 e2bdev/base:latest; do
        push_image "$layout" "127.0.0.1:$REGISTRY_PORT/$hub_name"
      done
      summary+=("pushed         aenv/base as 127.0.0.1:$REGISTRY_PORT/{library/ubuntu:22.04,e2bdev/base:latest}")
    fi
    if [ "$name" = busybox ]; then
      t0=$(aenv_now_ms)
      push_image "$layout" "127.0.0.1:$AUTH_REGISTRY_PORT/aenv/$name:latest" \
        --dest-creds "$AUTH_REGISTRY_USER:$AUTH_REGISTRY_PASSWORD"
      summary+=("pushed         127.0.0.1:$AUTH_REGISTRY_PORT/aenv/$name:latest in $(aenv_elapsed "$t0" "$(aenv_now_ms)")")
    fi
  done
fi

# --- the Python SDK's venv (a warning, not a failure: the services work without it; its tests fail) ---
t0=$(aenv_now_ms)
if pyvenv_python=$("$HERE/python-sdk.sh"); then
  summary+=("python SDK     $pyvenv_python ($("$pyvenv_python" -m pip show e2b 2>/dev/null | sed -n 's/^Version: /e2b /p'), $(aenv_elapsed "$t0" "$(aenv_now_ms)"))")
else
  summary+=("python SDK     NOT INSTALLED (test/services/python-sdk.sh failed; the Python SDK tests will fail)")
fi

printf 'test services up (state %s):\n' "$STATE_DIR"
printf '  %s\n' "${summary[@]}"
