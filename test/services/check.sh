#!/usr/bin/env bash
# Checks that the running test services behave as the tests expect (loopback only):
# registry pulls, basic auth refused without and accepted with credentials, redis set/get,
# S3 bucket write/read/list/delete. Prints one line per check; exits non-zero on the first failure.
# Usage: check.sh
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/common.sh
. "$HERE/../../scripts/lib/common.sh"
# shellcheck source=lib.sh
. "$HERE/lib.sh"
eval "$("$HERE/env.sh" 2>/dev/null)"

tmp=$(mktemp -d /tmp/aenv-services-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

ok() { printf 'ok    %s\n' "$*"; }
fail() {
  printf 'FAIL  %s\n' "$*" >&2
  exit 1
}
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@"; }

for name in "${SERVICES[@]}"; do
  svc_pid "$name" >/dev/null || fail "$name is not running (test/services/start.sh)"
done
ok "all services running"

[ "$(code "http://$AENV_TEST_REGISTRY/v2/")" = 200 ] || fail "registry /v2/ is not 200"
if [ -f "$AENV_TEST_BUSYBOX_LAYOUT/index.json" ]; then
  skopeo copy --quiet --src-tls-verify=false "docker://$AENV_TEST_BUSYBOX_IMAGE" "oci:$tmp/pulled:latest" >/dev/null ||
    fail "pull $AENV_TEST_BUSYBOX_IMAGE"
  ok "pulled $AENV_TEST_BUSYBOX_IMAGE"
fi

if [ -f "$AENV_TEST_BASE_LAYOUT/index.json" ]; then
  for hub_name in library/ubuntu:22.04 e2bdev/base:latest; do
    skopeo inspect --tls-verify=false "docker://$AENV_TEST_REGISTRY/$hub_name" >/dev/null ||
      fail "registry does not serve $hub_name (the docker.io stand-ins start.sh pushes)"
  done
  ok "registry serves library/ubuntu:22.04 and e2bdev/base:latest (docker.io stand-ins)"
fi

[ "$(code "http://$AENV_TEST_AUTH_REGISTRY/v2/")" = 401 ] || fail "auth registry answers without credentials"
[ "$(code -u "$AENV_TEST_AUTH_REGISTRY_USER:wrong" "http://$AENV_TEST_AUTH_REGISTRY/v2/")" = 401 ] ||
  fail "auth registry accepts a wrong password"
[ "$(code -u "$AENV_TEST_AUTH_REGISTRY_USER:$AENV_TEST_AUTH_REGISTRY_PASSWORD" "http://$AENV_TEST_AUTH_REGISTRY/v2/")" = 200 ] ||
  fail "auth registry refuses the right password"
ok "auth registry: 401 without or with a wrong password, 200 with $AENV_TEST_AUTH_REGISTRY_USER"
if [ -f "$AENV_TEST_BUSYBOX_LAYOUT/index.json" ]; then
  if skopeo inspect --tls-verify=false "docker://$AENV_TEST_AUTH_BUSYBOX_IMAGE" >/dev/null 2>&1; then
    fail "auth registry served a manifest without credentials"
  fi
  skopeo inspect --tls-verify=false --creds "$AENV_TEST_AUTH_REGISTRY_USER:$AENV_TEST_AUTH_REGISTRY_PASSWORD" \
    "docker://$AENV_TEST_AUTH_BUSYBOX_IMAGE" >/dev/null || fail "inspect $AENV_TEST_AUTH_BUSYBOX_IMAGE with credentials"
  ok "auth registry serves $AENV_TEST_AUTH_BUSYBOX_IMAGE only with credentials"
fi

redis_port=${AENV_TEST_REDIS_URL##*:}
key="aenv-check-$$"
[ "$(redis-cli -h 127.0.0.1 -p "$redis_port" set "$key" v1)" = OK ] || fail "redis SET"
[ "$(redis-cli -h 127.0.0.1 -p "$redis_port" get "$key")" = v1 ] || fail "redis GET"
redis-cli -h 127.0.0.1 -p "$redis_port" del "$key" >/dev/null
[ "$(redis-cli -h 127.0.0.1 -p "$redis_port" config get save | tail -n1)" = "" ] || fail "redis persists to disk"
ok "redis set/get/del, no persistence"

s3() {
  curl -sS --fail-with-body --max-time 10 --aws-sigv4 "aws:amz:$AENV_TEST_S3_REGION:s3" \
    --user "$AENV_TEST_S3_ACCESS_KEY:$AENV_TEST_S3_SECRET_KEY" "$@"
}
obj="$AENV_TEST_S3_ENDPOINT/$AENV_TEST_S3_BUCKET/aenv-check/$$"
head -c 100000 /dev/urandom >"$tmp/blob"
s3 -X PUT -H 'Content-Type: application/octet-stream' --data-binary "@$tmp/blob" "$obj" >/dev/null || fail "S3 PUT"
s3 -o "$tmp/back" "$obj" || fail "S3 GET"
cmp -s "$tmp/blob" "$tmp/back" || fail "S3 GET returned different bytes"
[ "$(code --aws-sigv4 "aws:amz:$AENV_TEST_S3_REGION:s3" --user "$AENV_TEST_S3_ACCESS_KEY:$AENV_TEST_S3_SECRET_KEY" \
  -X PUT -H 'If-None-Match: *' -H 'Content-Type: application/octet-stream' --data-binary x "$obj")" = 412 ] ||
  fail "S3 conditional PUT (If-None-Match: *) on an existing key is not 412"
s3 "$AENV_TEST_S3_ENDPOINT/$AENV_TEST_S3_BUCKET?list-type=2&prefix=aenv-check/$$" | grep -q "<Key>aenv-check/$$</Key>" ||
  fail "S3 ListObjectsV2"
s3 -X DELETE "$obj" >/dev/null || fail "S3 DELETE"
ok "S3 put/get (100 kB, byte-exact), If-None-Match 412, ListObjectsV2, delete"
