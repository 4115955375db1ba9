# Debian mirror discovery and a private apt state for fetching packages of another suite
# (e.g. trixie) without touching the host's apt configuration or state.
# shellcheck shell=bash

# Prints "<uri> <signed-by or empty>" of the host's apt entry whose suite is exactly $1
# (e.g. "bookworm" for the archive, "bookworm-security" for security). Reads the deb822
# files in /etc/apt/sources.list.d/*.sources and the one-line /etc/apt/sources.list(.d/*.list).
_aenv_apt_entry_for_suite() {
  local suite=$1 f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v want="$suite" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && enabled != "no" && uris != "") {
          n = split(suites, s, " ")
          for (i = 1; i <= n; i++) if (s[i] == want) { split(uris, u, " "); print u[1], signed; found = 1; exit }
        }
        types = ""; uris = ""; suites = ""; signed = ""; enabled = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      {
        key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
        if (key == "types") types = val
        else if (key == "uris") uris = val
        else if (key == "suites") suites = val
        else if (key == "signed-by") signed = val
        else if (key == "enabled") enabled = tolower(val)
      }
      END { if (!found) flush() }
    ' "$f" | head -n1 | grep . && return 0
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v want="$suite" '
      $1 != "deb" { next }
      {
        i = 2; signed = ""
        if ($2 ~ /^\[/) {
          while (i <= NF) {
            if ($i ~ /^\[?signed-by=/) { signed = $i; sub(/^\[?signed-by=/, "", signed); sub(/\]$/, "", signed) }
            if ($i ~ /\]$/) { i++; break }
            i++
          }
        }
        if ($(i + 1) == want) { print $i, signed; exit }
      }
    ' "$f" | head -n1 | grep . && return 0
  done
  return 1
}

aenv_host_codename() {
  # shellcheck disable=SC1091
  (. /etc/os-release && printf '%s\n' "${VERSION_CODENAME:?/etc/os-release has no VERSION_CODENAME}")
}

# The Debian archive mirror URI from the host's apt sources (override: AENV_DEBIAN_MIRROR).
aenv_debian_mirror() {
  if [ -n "${AENV_DEBIAN_MIRROR:-}" ]; then
    printf '%s\n' "${AENV_DEBIAN_MIRROR%/}"
    return 0
  fi
  local entry
  entry=$(_aenv_apt_entry_for_suite "$(aenv_host_codename)") ||
    aenv_die "no Debian archive entry for suite $(aenv_host_codename) in /etc/apt sources; set AENV_DEBIAN_MIRROR"
  entry=${entry%% *}
  printf '%s\n' "${entry%/}"
}

# The Debian security mirror URI, or nothing when the host has no security entry
# (override: AENV_DEBIAN_SECURITY_MIRROR; set it to "none" to skip security suites).
aenv_debian_security_mirror() {
  if [ -n "${AENV_DEBIAN_SECURITY_MIRROR:-}" ]; then
    [ "$AENV_DEBIAN_SECURITY_MIRROR" = none ] || printf '%s\n' "${AENV_DEBIAN_SECURITY_MIRROR%/}"
    return 0
  fi
  local entry
  entry=$(_aenv_apt_entry_for_suite "$(aenv_host_codename)-security") || return 0
  entry=${entry%% *}
  printf '%s\n' "${entry%/}"
}

# The keyring that verifies Debian archives (bookworm's debian-archive-keyring also holds
# the trixie keys).
aenv_debian_keyring() {
  local k
  for k in /usr/share/keyrings/debian-archive-keyring.gpg /usr/share/keyrings/debian-archive-keyring.pgp; do
    if [ -f "$k" ]; then printf "%s\n" "$k"; return 0; fi
  done
  aenv_die "debian-archive-keyring is not installed"
}

# Private apt state rooted at $1 for Debian suite $2 (e.g. trixie): writes the source list and
# empty parts dirs there. All later calls go through aenv_papt_get / aenv_papt_cache.
aenv_papt_init() {
  local root=$1 suite=$2 mirror security keyring
  mirror=$(aenv_debian_mirror)
  security=$(aenv_debian_security_mirror)
  keyring=$(aenv_debian_keyring)
  mkdir -p "$root/lists/partial" "$root/cache/archives/partial" "$root/sources.list.d" \
    "$root/preferences.d" "$root/debs"
  {
    printf 'deb [signed-by=%s] %s %s main\n' "$keyring" "$mirror" "$suite"
    # Only released suites have -updates and -security; testing/unstable would fail `apt-get update` on them.
    case $suite in
      bookworm | trixie)
        printf 'deb [signed-by=%s] %s %s-updates main\n' "$keyring" "$mirror" "$suite"
        [ -z "$security" ] || printf 'deb [signed-by=%s] %s %s-security main\n' "$keyring" "$security" "$suite"
        ;;
    esac
  } >"$root/sources.list.new"
  mv -f "$root/sources.list.new" "$root/sources.list"
}

_aenv_papt_opts() {
  local root=$1
  printf '%s\n' \
    -o "Dir::Etc::sourcelist=$root/sources.list" \
    -o "Dir::Etc::sourceparts=$root/sources.list.d" \
    -o "Dir::Etc::preferences=$root/preferences" \
    -o "Dir::Etc::preferencesparts=$root/preferences.d" \
    -o "Dir::State::Lists=$root/lists" \
    -o "Dir::Cache=$root/cache" \
    -o "Dir::Cache::pkgcache=pkgcache.bin" \
    -o "Dir::Cache::srcpkgcache=srcpkgcache.bin" \
    -o "Acquire::Languages=none" \
    -o "APT::Sandbox::User=root"
}

aenv_papt_get() {
  local root=$1
  shift
  local -a opts
  mapfile -t opts < <(_aenv_papt_opts "$root")
  apt-get "${opts[@]}" "$@"
}

aenv_papt_cache() {
  local root=$1
  shift
  local -a opts
  mapfile -t opts < <(_aenv_papt_opts "$root")
  apt-cache "${opts[@]}" "$@"
}

# Refreshes the private lists (quietly; the log is shown on failure).
aenv_papt_update() {
  local root=$1 log
  log=$(mktemp /tmp/aenv-papt.XXXXXX)
  if ! aenv_papt_get "$root" -q update >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    aenv_die "apt-get update for the private source list $root/sources.list failed"
  fi
  # apt-get update exits 0 even when an index could not be fetched.
  if grep -qE '^(W|E): (Failed to fetch|Some index files failed)' "$log"; then
    cat "$log" >&2
    rm -f "$log"
    aenv_die "apt-get update for $root/sources.list could not fetch every index"
  fi
  rm -f "$log"
}

# "<package> <candidate version>" for each package (one apt-cache call; "(none)" when absent).
aenv_papt_candidates() {
  local root=$1
  shift
  aenv_papt_cache "$root" policy "$@" | awk '
    /^[^ ]/ { pkg = $1; sub(/:$/, "", pkg) }
    $1 == "Candidate:" { print pkg, $2 }
  '
}

# Downloads the candidate .debs of the given packages into $root/debs (reusing files already
# there) and prints their paths, one per line.
aenv_papt_download() {
  local root=$1
  shift
  local pkg version file log
  local -a want=()
  while read -r pkg version; do
    [ -n "$version" ] && [ "$version" != "(none)" ] || aenv_die "package $pkg has no candidate in $root/sources.list"
    want+=("$pkg=$version")
  done < <(aenv_papt_candidates "$root" "$@")
  [ ${#want[@]} -eq $# ] || aenv_die "apt-cache policy did not report every package of: $*"
  log=$(mktemp /tmp/aenv-papt.XXXXXX)
  if ! (cd "$root/debs" && aenv_papt_get "$root" -q download "${want[@]}") >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    aenv_die "apt-get download failed for: $*"
  fi
  rm -f "$log"
  for pkg in "${want[@]}"; do
    # apt names files <name>_<version with ':' as %3a>_<arch>.deb
    version=${pkg#*=}
    file=$(find "$root/debs" -maxdepth 1 -name "${pkg%%=*}_${version//:/%3a}_*.deb" -print -quit)
    [ -n "$file" ] || aenv_die "downloaded .deb for $pkg not found in $root/debs"
    printf '%s\n' "$file"
  done
}

# "<package> <dependency>" for the first alternative of every Depends/Pre-Depends entry of the
# candidates of the given packages, without version constraints or architecture qualifiers.
aenv_papt_direct_deps() {
  local root=$1
  shift
  aenv_papt_cache "$root" show --no-all-versions "$@" 2>/dev/null | awk '
    /^Package:/ { pkg = $2 }
    /^(Pre-)?Depends:/ {
      line = $0; sub(/^[^:]*:[ \t]*/, "", line)
      n = split(line, alts, ",")
      for (i = 1; i <= n; i++) {
        d = alts[i]; sub(/\|.*/, "", d); sub(/\(.*\)/, "", d); gsub(/[ \t]/, "", d); sub(/:[a-z0-9]+$/, "", d)
        if (d != "") print pkg, d
      }
    }
  ' | sort -u
}
