#!/usr/bin/env bash
# Installs every Debian 12 package clashd needs to build, test and benchmark.
# The one list used by the README quick start, .ci/run and docker/: keep it the only one.
# Idempotent: packages already present are not downloaded again.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ca-certificates clang-format python3
  # geometry core
  libeigen3-dev libabsl-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  # comparison libraries (benchmarks only)
  libfcl-dev libembree-dev
  # CAD import (OCCT 7.6) and sample files
  libocct-foundation-dev libocct-modeling-data-dev libocct-modeling-algorithms-dev
  libocct-data-exchange-dev libocct-ocaf-dev occt-misc
  # SHA-256 for the import cache
  libssl-dev
  # service, and its command-line tools (clash-import): CLI11 flags, nlohmann-json output
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libcli11-dev nlohmann-json3-dev
  # clashd's allocator (gperftools' tcmalloc_minimal; CMake option CLASH_TCMALLOC)
  libgoogle-perftools-dev
  # the second-language client test (Python stubs generated at test time)
  python3-grpcio python3-grpc-tools python3-protobuf
  # the HTML sequence report's screenshot test (headless, software WebGL)
  chromium
  # libFuzzer targets (clang with compiler-rt), and the security test's certificates
  clang libclang-rt-14-dev openssl
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm install three.js for clashctl's HTML report at build time. Checked as commands,
# not packages: a machine with another Node.js build (e.g. NodeSource's, whose nodejs package
# carries npm and conflicts with Debian's npm) needs nothing more.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present (and node, npm)"
  exit 0
fi
echo "install-deps: installing ${#missing[@]} package(s): ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
