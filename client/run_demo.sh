#!/usr/bin/env bash
# The main job of the README quick start, on a fresh Debian 12 machine (as root, or with sudo):
# installs what is missing, builds, starts clashd on its embedded defaults (127.0.0.1:50051, data
# in ./clashd-data of its working folder build/demo), generates the project's sample assembly,
# imports it into a scene, checks it and prints the clash report (also written as JUnit XML),
# validates the sample assembly sequence (client/sample_sequence.json) and prints its report,
# then stops the server. Exit code 0 when the run went as expected: the sample holds exactly one
# deliberate hard clash (a pin through the bracket), which the check and the sequence's last
# step must find.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="${CLASH_JOBS:-2}"

[ "${CLASH_SKIP_INSTALL:-0}" = 1 ] || bash .ci/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build -j"$jobs" clashd clashctl clash-cad-worker clash-sample-assembly

run="$root/build/demo"
rm -rf "$run" && mkdir -p "$run" && cd "$run"
ctl() { "$root/build/client/clashctl" "$@"; }

echo "== generating the sample assembly"
"$root/build/geom/cad/clash-sample-assembly" sample.step

echo "== starting clashd (embedded defaults; log in $run/clashd.log)"
"$root/build/server/clashd" >clashd.log 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 200); do ctl health >/dev/null 2>&1 && break; sleep 0.1; done
ctl health

echo "== importing sample.step into a new scene"
scene="$(ctl -q scene create sample)"
ctl import sample.step --scene "$scene"

echo "== checking scene $scene (clearance 1 mm; contacts listed too)"
status=0
ctl check "$scene" --clearance-mm 1 --all-classes --junit report.xml || status=$?
echo "JUnit report: $run/report.xml"

echo "== validating the sample assembly sequence ($root/client/sample_sequence.json)"
seq_status=0
ctl validate "$scene" "$root/client/sample_sequence.json" --junit sequence.xml || seq_status=$?
echo "JUnit report: $run/sequence.xml"

echo "== stopping clashd"
kill -TERM "$pid"
wait "$pid"
trap - EXIT
if [ "$status" -ne 1 ] || [ "$seq_status" -ne 1 ]; then
  echo "demo: expected the check and the sequence to find the sample's deliberate pin clash" \
       "(exit 1 each), got $status and $seq_status" >&2
  exit 1
fi
echo "demo: done (the hard clash and the blocked last step above are the sample's deliberate pin)"
