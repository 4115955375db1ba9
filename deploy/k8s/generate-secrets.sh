#!/usr/bin/env bash
# Writes the secrets the Kustomize base reads (base/secrets/*, mode 0600), keeping any that exist:
# the control-plane API key, the sandbox access-token seed, the snapshot record signing secret and the
# /secrets encryption key. Every node (and, for the API key, gateway) of one cluster must use the same
# ones (docs/cluster.md#secrets-that-must-be-shared).
# Usage: deploy/k8s/generate-secrets.sh [DIR]   (default: the base's secrets/ directory)
set -euo pipefail

dir=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/base/secrets}
umask 077
mkdir -p "$dir"

hex32() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }

write_once() {
  local file=$dir/$1 value=$2
  if [ -s "$file" ]; then
    printf 'kept     %s\n' "$file"
    return 0
  fi
  printf '%s' "$value" >"$file.tmp"
  mv -f "$file.tmp" "$file"
  printf 'created  %s\n' "$file"
}

write_once api-key "e2b_$(hex32)"
write_once sandbox-access-token-hash-seed "$(hex32)"
write_once snapshot-record-signing-secret "$(hex32)"
write_once secrets-encryption-key "$(hex32)"
