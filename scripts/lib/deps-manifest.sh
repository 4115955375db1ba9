# Reads config/deps_manifest.toml, the subset it is written in: [deps.<name>] tables whose keys each sit on
# one line, with a double-quoted string or a list of them (no escapes, no multi-line values).
# shellcheck shell=bash

AENV_DEPS_MANIFEST=${AENV_DEPS_MANIFEST:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/config/deps_manifest.toml}

# Prints one line per dependency: name<TAB>modes(,)<TAB>group<TAB>source<TAB>package<TAB>version<TAB>suite
aenv_manifest_rows() {
  awk '
    function flush() {
      if (name != "") print name "\t" f["modes"] "\t" f["group"] "\t" f["source"] "\t" f["package"] "\t" f["version"] "\t" f["suite"]
      delete f
    }
    /^[ \t]*(#|$)/ { next }
    /^\[deps\.[A-Za-z0-9_-]+\][ \t]*$/ { flush(); name = $0; sub(/^\[deps\./, "", name); sub(/\][ \t]*$/, "", name); next }
    /^\[/ { flush(); name = ""; next }
    {
      line = $0
      key = line; sub(/[ \t]*=.*/, "", key)
      val = line; sub(/^[^=]*=[ \t]*/, "", val); sub(/[ \t]*(#.*)?$/, "", val)
      if (val ~ /^\[/) { gsub(/[][" \t]/, "", val) } else { gsub(/^"|"$/, "", val) }
      f[key] = val
    }
    END { flush() }
  ' "$AENV_DEPS_MANIFEST"
}

# Names every mode the manifest knows (besides "all").
aenv_manifest_modes() {
  aenv_manifest_rows | cut -f2 | tr ',' '\n' | grep -vx all | sort -u
}

# Debian packages (source "debian") of mode $1 and of every mode, in the groups named by $2.. (runtime images test).
aenv_manifest_debs() {
  local mode=$1
  shift
  local groups=" $* "
  aenv_manifest_rows | while IFS=$'\t' read -r _name modes group source package _version _suite; do
    [ "$source" = debian ] || continue
    case "$groups" in *" $group "*) ;; *) continue ;; esac
    case ",$modes," in *",all,"* | *",$mode,"*) printf '%s\n' "$package" ;; esac
  done
}

# Prints the value of key $2 of dependency $1 (empty when it has none).
aenv_manifest_get() {
  local want=$1 key=$2 col
  case $key in
    modes) col=2 ;; group) col=3 ;; source) col=4 ;; package) col=5 ;; version) col=6 ;; suite) col=7 ;;
    *) return 1 ;;
  esac
  aenv_manifest_rows | awk -F'\t' -v n="$want" -v c="$col" '$1 == n { print $c; exit }'
}
