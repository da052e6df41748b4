#!/bin/sh
# The container's entrypoint (installed as PREFIX/bin/clashd-entrypoint): clashd with its data
# under the volume and the shutdown grace period the container's stop timeout is sized for; the
# arguments (the image's CMD, or those given to `docker run`) add the listener, TLS and tokens.
# exec: clashd itself receives SIGTERM from `docker stop`.
# Env: CLASHD_DATA_DIR (default /var/lib/clashd/data), CLASHD_SHUTDOWN_GRACE_SECONDS (default 20;
#      keep the stop timeout / compose stop_grace_period at least 10 s above it).
set -eu
bin_dir="$(dirname "$0")"
exec "$bin_dir/clashd" \
  --data-dir "${CLASHD_DATA_DIR:-/var/lib/clashd/data}" \
  --shutdown-grace-seconds "${CLASHD_SHUTDOWN_GRACE_SECONDS:-20}" \
  "$@"
