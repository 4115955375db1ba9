#!/usr/bin/env bash
# Creates (or refreshes) the Python venv the Python SDK tests run in: Debian's python3 + venv, and the packages
# pinned in test/python/requirements.txt, at $AENV_TEST_PYVENV (/var/lib/aenv-test/pyvenv). Idempotent: it
# reinstalls only when the requirements file or the interpreter changed (a stamp in the venv holds both).
# Usage: python-sdk.sh        Prints the venv's python.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/common.sh
. "$HERE/../../scripts/lib/common.sh"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

REQUIREMENTS=$HERE/../python/requirements.txt
PY=/usr/bin/python3
aenv_require_root test/services/python-sdk.sh
installed=$(aenv_ensure_debs python3 python3-venv)
[ -z "$installed" ] || aenv_log "installed: $installed"

mkdir -p "$DATA_DIR"
exec 8>"$DATA_DIR/.pyvenv.lock"
flock 8

want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1) $("$PY" -c 'import sys; print(sys.version.split()[0])')"
stamp=$PYVENV_DIR/.aenv-requirements
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$PYVENV_DIR/bin/python" -c 'import e2b, pytest' 2>/dev/null; then
  printf '%s\n' "$PYVENV_DIR/bin/python"
  exit 0
fi

# Made anew: the stamp is written last, so an install that failed halfway is redone next time.
rm -rf "$PYVENV_DIR"
mkdir -p "$(dirname "$PYVENV_DIR")"
log=$(mktemp /tmp/aenv-pyvenv.XXXXXX)
if ! { "$PY" -m venv "$PYVENV_DIR" && "$PYVENV_DIR/bin/python" -m pip install --no-input -q -r "$REQUIREMENTS"; } >"$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  aenv_die "could not install test/python/requirements.txt into $PYVENV_DIR (is PyPI reachable?)"
fi
rm -f "$log"
printf '%s\n' "$want" >"$stamp"
"$PYVENV_DIR/bin/python" -c 'import e2b, pytest' || aenv_die "the venv at $PYVENV_DIR does not import e2b"
printf '%s\n' "$PYVENV_DIR/bin/python"
