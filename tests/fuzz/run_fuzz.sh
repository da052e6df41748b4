#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz and runs each briefly from
# a seed corpus made here: valid requests (protoc --encode of text-format messages) and valid
# worker result files. Any crash, sanitizer report or timeout fails.
# Usage: bash tests/fuzz/run_fuzz.sh [SECONDS per target, default 30]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
seconds="${1:-30}"
build="$root/build-fuzz"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" \
      -DCLASH_BUILD_FUZZ=ON -DCLASH_BUILD_TESTS=OFF -DCLASH_BUILD_BENCH=OFF \
      -DCLASH_TCMALLOC=OFF >/dev/null
ninja -C "$build" -j"${CLASH_JOBS:-2}" fuzz_worker_output fuzz_request

corpus="$build/corpus"
rm -rf "$corpus" && mkdir -p "$corpus/request" "$corpus/worker_output"
python3 "$root/tests/fuzz/make_seeds.py" --proto-dir "$root/proto" --out "$corpus"

export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
for t in worker_output request; do
  echo "fuzz_$t: ${seconds}s from $(ls "$corpus/$t" | wc -l) seeds"
  log="$build/fuzz_$t.log"
  (cd "$build" && "./tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=3072 -max_len=4096 -print_final_stats=1 "$corpus/$t" >"$log" 2>&1) \
    || { tail -n 60 "$log"; echo "fuzz_$t failed (crash input in $build)" >&2; exit 1; }
  tail -n 12 "$log"
done
