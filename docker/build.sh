#!/usr/bin/env bash
# Builds clashd, clash-cad-worker and clashctl with the CI's build commands and installs them,
# with the container's entrypoint and health check, into PREFIX/bin. The image's build stage runs
# this; so does CI (tests/docker), with --install-only on the tree it has already built.
# Usage: docker/build.sh [--build-dir DIR] [--prefix DIR] [--install-only]
#   --build-dir DIR  CMake build folder (default: build-docker beside this script's repository)
#   --prefix DIR     install prefix (default: /opt/clashd)
#   --install-only   skip configure and build; install from a folder that is already built
# Env: CLASH_JOBS (default 2)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build-docker"
prefix=/opt/clashd
install_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --prefix) prefix="$2"; shift 2 ;;
    --install-only) install_only=1; shift ;;
    *) echo "build.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

# What the runtime stage runs. clashd finds clash-cad-worker next to itself.
targets=(clashd clash-cad-worker clashctl)

if [ "$install_only" != 1 ]; then
  # The CI's configuration (tests/run_all.sh) without tests and benchmarks.
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCLASH_WERROR=ON \
        -DCLASH_BUILD_TESTS=OFF -DCLASH_BUILD_BENCH=OFF
  ninja -C "$build_dir" -j"${CLASH_JOBS:-2}" "${targets[@]}"
fi

# The install rules (CMakeLists.txt, component "runtime") copy the three executables, stripped.
cmake --install "$build_dir" --prefix "$prefix" --component runtime --strip
install -m 0755 "$root/docker/entrypoint.sh" "$prefix/bin/clashd-entrypoint"
install -m 0755 "$root/docker/healthcheck.sh" "$prefix/bin/clashd-healthcheck"
for t in "${targets[@]}"; do
  [ -x "$prefix/bin/$t" ] || { echo "build.sh: $prefix/bin/$t was not installed" >&2; exit 1; }
done
echo "build.sh: installed ${targets[*]} clashd-entrypoint clashd-healthcheck into $prefix/bin"
