#!/usr/bin/env bash
# The runtime libraries of clashd, clash-cad-worker and clashctl: the one list the image's runtime
# stage installs, and the check that it is complete.
# Usage: docker/runtime-deps.sh install       apt-get the packages (the runtime stage, as root)
#        docker/runtime-deps.sh check PREFIX  every shared library the executables in PREFIX/bin
#                                             need (ldd) must come (dpkg -S) from a listed package
#                                             or one apt installs with them (their Depends);
#                                             exits 1 naming each library that does not
#        docker/runtime-deps.sh list          print the packages
set -euo pipefail

# Debian 12 runtime packages of the -dev packages the build links (.ci/install-deps.sh).
PACKAGES=(
  libabsl20220623                  # abseil
  libprotobuf32                    # protobuf 3.21
  libgrpc++1.51 libgrpc29          # gRPC 1.51
  libssl3                          # SHA-256 of the import cache (and gRPC's TLS)
  libtcmalloc-minimal4             # clashd's allocator (CLASH_TCMALLOC)
  libocct-foundation-7.6 libocct-modeling-data-7.6 libocct-modeling-algorithms-7.6
  libocct-data-exchange-7.6 libocct-ocaf-7.6  # OCCT 7.6 (clash-cad-worker)
)

# Packages apt installs for the list: the list and its Depends/PreDepends, recursively.
closure() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "${PACKAGES[@]}" |
    sed -n 's/^\( *|\?[A-Za-z]*Depends: \)\?\([a-z0-9][a-z0-9.+-]*\)\(:[a-z0-9]*\)\?$/\2/p' |
    sed 's/^ *//' | sort -u
}

check() {
  local prefix="$1" failed=0 exe lib p
  declare -A allowed=() owner=() used=() needed_by=()
  for p in $(closure); do allowed[$p]=1; done
  [ ${#allowed[@]} -gt ${#PACKAGES[@]} ] || { echo "runtime-deps: apt-cache gave no closure" >&2; exit 1; }
  for p in "${PACKAGES[@]}"; do
    apt-cache show "$p" >/dev/null 2>&1 || { echo "runtime-deps: no package '$p'" >&2; failed=1; }
  done
  local exes=()
  for exe in "$prefix"/bin/*; do
    [ "$(head -c 4 "$exe" | tr -d '\0')" = $'\x7fELF' ] && exes+=("$exe")
  done
  [ ${#exes[@]} -gt 0 ] || { echo "runtime-deps: no executable in $prefix/bin" >&2; exit 1; }
  for exe in "${exes[@]}"; do
    local deps
    deps="$(ldd "$exe")"
    if grep -q 'not found' <<<"$deps"; then
      echo "runtime-deps: $(basename "$exe"): $(grep 'not found' <<<"$deps" | tr -s ' \t' ' ')" >&2
      failed=1
    fi
    while read -r lib; do
      needed_by[$lib]="${needed_by[$lib]:-}${needed_by[$lib]:+ }$(basename "$exe")"
    done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3}' <<<"$deps")
  done
  # One dpkg query for every name a library may be known by: as ldd printed it, resolved, and
  # with or without /usr (on Debian 12 /lib is /usr/lib, and dpkg knows each file by one name).
  local names=() real
  declare -A alias_of=()
  for lib in "${!needed_by[@]}"; do
    real="$(readlink -f "$lib")"
    for p in "$lib" "$real" "/usr$lib" "/usr$real" "${lib#/usr}" "${real#/usr}"; do
      [ -n "${alias_of[$p]:-}" ] || { alias_of[$p]="$lib"; names+=("$p"); }
    done
  done
  while IFS= read -r line; do
    p="${line%%: /*}"   # "pkg:arch[, pkg2...]: /path"
    p="${p%%,*}"
    p="${p%%:*}"
    local path="/${line#*: /}"
    [ -n "${alias_of[$path]:-}" ] && owner[${alias_of[$path]}]="$p"
  done < <(dpkg-query -S "${names[@]}" 2>/dev/null || true)
  for lib in "${!needed_by[@]}"; do
    p="${owner[$lib]:-}"
    if [ -z "$p" ]; then
      echo "runtime-deps: ${needed_by[$lib]} need(s) $lib, which no package owns" >&2
      failed=1
    elif [ -z "${allowed[$p]:-}" ]; then
      echo "runtime-deps: ${needed_by[$lib]} need(s) $lib from $p, which the runtime stage does not install" >&2
      failed=1
    else
      used[$p]=1
    fi
  done
  # A listed package no executable needs is dead weight in the image.
  for p in "${PACKAGES[@]}"; do
    [ -n "${used[$p]:-}" ] || { echo "runtime-deps: '$p' is listed but no executable needs it" >&2; failed=1; }
  done
  [ "$failed" = 0 ] || exit 1
  echo "runtime-deps: ${#exes[@]} executables need ${#needed_by[@]} libraries, all from the ${#PACKAGES[@]} listed packages and their dependencies"
}

case "${1:-}" in
  install)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}"
    rm -rf /var/lib/apt/lists/*
    ;;
  check)
    [ $# -eq 2 ] || { echo "usage: $0 check PREFIX" >&2; exit 2; }
    check "$2"
    ;;
  list) printf '%s\n' "${PACKAGES[@]}" ;;
  *) echo "usage: $0 install | check PREFIX | list" >&2; exit 2 ;;
esac
