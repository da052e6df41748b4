#!/usr/bin/env bash
# The one test command (README quick start, .ci/run): installs what is missing, checks
# formatting, builds, runs the benchmark agreement checks and every test, fuzzes the request and
# worker-output parsers briefly, and runs every test again under ASan+UBSan (CLASH_TEST_SCALE=0.1).
# Usage: bash tests/run_all.sh            (as root on Debian 12, or with sudo available)
# Env:   CLASH_JOBS (default 2), CLASH_SKIP_INSTALL=1, CLASH_SKIP_SANITIZE=1,
#        CLASH_FUZZ_SECONDS (per fuzz target, default 30)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="${CLASH_JOBS:-2}"

[ "${CLASH_SKIP_INSTALL:-0}" = 1 ] || bash .ci/install-deps.sh

section() { printf '\n== %s\n' "$*"; }

section "format check (clang-format, Google style)"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t sources < <(git ls-files '*.h' '*.cc')
else  # a checkout without .git: every source folder
  mapfile -t sources < <(find geom server client tests bench -name '*.h' -o -name '*.cc')
fi
# An empty list would make clang-format read stdin and pass.
[ "${#sources[@]}" -gt 100 ] || { echo "format check: only ${#sources[@]} sources found" >&2; exit 1; }
clang-format --dry-run -Werror "${sources[@]}"
echo "formatted: ${#sources[@]} files"

section "build (RelWithDebInfo, warnings as errors)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCLASH_WERROR=ON \
      -DCLASH_BUILD_TESTS=ON -DCLASH_BUILD_BENCH=ON >/dev/null
ninja -C build -j"$jobs"

section "benchmark agreement checks (answers agree with FCL, Embree and OCCT; timings not judged)"
bench/compare build --benchmark_min_time=0.001 >build/bench-check.log 2>&1 \
  || { cat build/bench-check.log; exit 1; }
tail -n 1 build/bench-check.log
build/bench/clash_service_bench --check-only >build/service-bench-check.log 2>&1 \
  || { cat build/service-bench-check.log; exit 1; }
tail -n 1 build/service-bench-check.log

section "tests"
(cd build && ctest --output-on-failure -j"$jobs" --timeout 900)

section "fuzz (libFuzzer, clang, ASan+UBSan; brief)"
bash tests/fuzz/run_fuzz.sh "${CLASH_FUZZ_SECONDS:-30}"

if [ "${CLASH_SKIP_SANITIZE:-0}" != 1 ]; then
  section "all tests again under ASan+UBSan (Debug, assertions on)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCLASH_SANITIZE="address;undefined" \
        -DCLASH_WERROR=ON -DCLASH_BUILD_TESTS=ON -DCLASH_BUILD_BENCH=OFF >/dev/null
  ninja -C build-asan -j"$jobs"
  # The sanitizers look for memory and UB errors; a 10% prefix of each seeded random test suffices.
  (cd build-asan && CLASH_TEST_SCALE=0.1 ctest --output-on-failure -j"$jobs" --timeout 1800)
fi
