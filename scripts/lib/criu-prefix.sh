# CRIU >= 4.2 from Debian packages (forky by default), unpacked into a private prefix
# <criu-root>/<version>/ with <criu-root>/current -> <version> (docs/install.md).
# Bookworm's CRIU 3.17 fails on kernels >= 6.13 (vDSO). Trixie's 4.1.1 fixes that but cannot dump
# any TCP socket on these kernels (getsockopt SO_PASSCRED -> EOPNOTSUPP), and every sandbox has one
# (envd), so 4.2 is the floor. Newer suites' binaries need their own glibc, so the binary is patched
# to use the prefix's own loader and libraries. Never built from source.
# shellcheck shell=bash

AENV_CRIU_SUITE=${AENV_CRIU_SUITE:-forky}
AENV_CRIU_MIN_VERSION=${AENV_CRIU_MIN_VERSION:-4.2}
AENV_CRIU_MAX_ROUNDS=25
AENV_ARCH_TRIPLET=x86_64-linux-gnu

# "4.1.1" from `criu --version`, or nothing.
aenv_criu_version_of() {
  "$1" --version 2>/dev/null | awk '/^Version:/ { print $2; exit }'
}

# True when version $1 >= version $2.
aenv_version_ge() {
  [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]
}

# True when <criu-root>/current holds a complete, working CRIU >= the minimum.
aenv_criu_ready() {
  local root=$1 v
  [ -f "$root/current/.aenv/complete" ] && [ -x "$root/current/bin/criu" ] || return 1
  v=$(aenv_criu_version_of "$root/current/bin/criu")
  [ -n "$v" ] && aenv_version_ge "$v" "$AENV_CRIU_MIN_VERSION"
}

# Follows symlinks of $2 inside prefix $1 (absolute targets are taken relative to the prefix).
# Prints the resolved in-prefix path, or fails when it does not exist.
_aenv_prefix_resolve() {
  local prefix=$1 path=$2 target i
  for ((i = 0; i < 16; i++)); do
    if [ -L "$path" ]; then
      target=$(readlink "$path")
      case $target in
        /*) path=$prefix$target ;;
        *) path=$(dirname "$path")/$target ;;
      esac
    elif [ -e "$path" ]; then
      printf '%s\n' "$path"
      return 0
    else
      return 1
    fi
  done
  return 1
}

# Rewrites absolute symlinks under $1 to relative in-prefix ones, so nothing in the prefix
# points at the host's (older) files.
_aenv_prefix_relink() {
  local prefix=$1 link target
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    case $target in
      /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$prefix$target")" "$link" ;;
    esac
  done < <(find "$prefix" -type l -print0)
}

_aenv_lib_dirs() {
  local prefix=$1
  printf '%s\n' "$prefix/usr/lib/$AENV_ARCH_TRIPLET" "$prefix/lib/$AENV_ARCH_TRIPLET" "$prefix/usr/lib" "$prefix/lib"
}

# Finds soname $2 in the prefix library dirs; prints the resolved path.
_aenv_find_soname() {
  local prefix=$1 soname=$2 dir
  while IFS= read -r dir; do
    [ -e "$dir/$soname" ] || [ -L "$dir/$soname" ] || continue
    _aenv_prefix_resolve "$prefix" "$dir/$soname" && return 0
  done < <(_aenv_lib_dirs "$prefix")
  return 1
}

# Walks the DT_NEEDED graph from ELF $2 inside prefix $1 and prints "<soname> <needing file>"
# for every soname not present in the prefix.
_aenv_missing_sonames() {
  local prefix=$1 start=$2 file soname found
  local -A seen=() resolved=()
  local -a queue=("$start")
  while [ ${#queue[@]} -gt 0 ]; do
    file=${queue[0]}
    queue=("${queue[@]:1}")
    [ -z "${seen[$file]:-}" ] || continue
    seen[$file]=1
    while IFS= read -r soname; do
      if [ -z "${resolved[$soname]+set}" ]; then
        resolved[$soname]=$(_aenv_find_soname "$prefix" "$soname" || true)
      fi
      found=${resolved[$soname]}
      if [ -n "$found" ]; then
        [ -n "${seen[$found]:-}" ] || queue+=("$found")
      else
        printf '%s %s\n' "$soname" "$file"
      fi
    done < <(LC_ALL=C readelf -d "$file" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  done
}

# Unpacks .deb $2 into prefix $1 and records which package owns which path.
_aenv_prefix_unpack() {
  local prefix=$1 deb=$2 name
  name=$(dpkg-deb -f "$deb" Package)
  dpkg-deb -x "$deb" "$prefix"
  dpkg-deb -c "$deb" | awk '{ p = $6; sub(/^\./, "", p); if (p != "/" && p !~ /\/$/) print p }' \
    >"$prefix/.aenv/owners/$name"
  printf '%s %s\n' "$name" "$(dpkg-deb -f "$deb" Version)" >>"$prefix/.aenv/packages"
}

# Package (already unpacked in prefix $1) owning in-prefix file $2.
_aenv_prefix_owner() {
  local prefix=$1 rel=${2#"$1"} f
  for f in "$prefix"/.aenv/owners/*; do
    if grep -qxF -- "$rel" "$f"; then
      basename "$f"
      return 0
    fi
  done
  return 1
}

# Installs CRIU into <root>/<version>, points <root>/current at it. Prints the version.
aenv_criu_install() {
  local root=$1 apt_root version final stage round pkg deb debs soname needer owner missing dep
  local -A fetched=()
  local -a wanted
  apt_root=$root/apt
  aenv_papt_init "$apt_root" "$AENV_CRIU_SUITE"
  aenv_papt_update "$apt_root"
  version=$(aenv_papt_candidates "$apt_root" criu | awk '{ print $2 }')
  [ -n "$version" ] && [ "$version" != "(none)" ] || aenv_die "no criu package in Debian $AENV_CRIU_SUITE"
  version=${version#*:}
  final=$root/$version

  if [ ! -f "$final/.aenv/complete" ]; then
    stage=$(mktemp -d "$root/.stage-$version.XXXXXX")
    # shellcheck disable=SC2064 # expand now: the trap must remove this exact dir
    trap "rm -rf '$stage'" EXIT
    mkdir -p "$stage/.aenv/owners"
    wanted=(criu)
    for ((round = 0; round < AENV_CRIU_MAX_ROUNDS; round++)); do
      debs=$(aenv_papt_download "$apt_root" "${wanted[@]}")
      while IFS= read -r deb; do
        _aenv_prefix_unpack "$stage" "$deb"
      done <<<"$debs"
      for pkg in "${wanted[@]}"; do fetched[$pkg]=1; done
      _aenv_prefix_relink "$stage"
      [ -x "$stage/usr/sbin/criu" ] || aenv_die "the criu package has no usr/sbin/criu"

      missing=$(_aenv_missing_sonames "$stage" "$stage/usr/sbin/criu")
      [ -n "$missing" ] || break
      # A missing soname comes from a direct dependency of the package that needs it.
      local -A owners=()
      while read -r soname needer; do
        owner=$(_aenv_prefix_owner "$stage" "$needer") || aenv_die "no package owns $needer"
        owners[$owner]+="$soname "
      done <<<"$missing"
      wanted=()
      while read -r owner dep; do
        [ -n "${fetched[$dep]:-}" ] || [[ " ${wanted[*]} " == *" $dep "* ]] || wanted+=("$dep")
      done < <(aenv_papt_direct_deps "$apt_root" "${!owners[@]}")
      [ ${#wanted[@]} -gt 0 ] ||
        aenv_die "cannot resolve ${owners[*]}(needed by packages ${!owners[*]}) from $AENV_CRIU_SUITE packages"
      unset owners
    done
    [ -z "$missing" ] || aenv_die "library closure of criu did not settle after $AENV_CRIU_MAX_ROUNDS rounds"

    local loader rpath
    loader=$(_aenv_find_soname "$stage" ld-linux-x86-64.so.2) || aenv_die "no loader in the $AENV_CRIU_SUITE libc6"
    # The final path, not the stage path: the binary is used after the rename below.
    loader=$final${loader#"$stage"}
    rpath="$final/usr/lib/$AENV_ARCH_TRIPLET:$final/lib/$AENV_ARCH_TRIPLET"
    # --force-rpath: DT_RPATH (unlike RUNPATH) also serves the libraries' own dependencies.
    patchelf --set-interpreter "$loader" --force-rpath --set-rpath "$rpath" "$stage/usr/sbin/criu"
    mkdir -p "$stage/bin"
    ln -sfn ../usr/sbin/criu "$stage/bin/criu"
    printf '%s\n' "$AENV_CRIU_SUITE" >"$stage/.aenv/suite"
    date -u +%Y-%m-%dT%H:%M:%SZ >"$stage/.aenv/complete"
    rm -rf "$final"
    mv -T "$stage" "$final"
    trap - EXIT
  fi

  ln -sfn "$version" "$root/.current.new"
  mv -Tf "$root/.current.new" "$root/current"
  printf '%s\n' "$version"
}

# Writes <root>/criu.conf (atomically, only when it differs).
aenv_criu_write_config() {
  local root=$1 want
  want='# Written by aenv scripts/setup-host.sh. aenv owns every sandbox network namespace and no
# traffic flows while a sandbox is frozen, so CRIU need not lock the network (host-facts.md).
network-lock skip'
  if [ ! -f "$root/criu.conf" ] || [ "$(cat "$root/criu.conf")" != "$want" ]; then
    printf '%s\n' "$want" >"$root/criu.conf.new"
    mv -f "$root/criu.conf.new" "$root/criu.conf"
  fi
}

# Removes stage dirs an interrupted install left behind.
aenv_criu_reconcile() {
  local root=$1 d
  for d in "$root"/.stage-*; do
    if [ -e "$d" ]; then rm -rf "$d"; fi
  done
  rm -f "$root/.current.new" "$root/criu.conf.new"
}
