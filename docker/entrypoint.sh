#!/bin/sh
# The container's entrypoint (installed as PREFIX/bin/clashd-entrypoint): clashd with its data
# under the volume and the shutdown grace period the container's stop timeout is sized for; the
# arguments (the image's CMD, or those given to `docker run`) add the listener, TLS and tokens.
# exec: clashd itself receives SIGTERM from `docker stop`.
# Env: CLASHD_DATA_DIR (default /var/lib/clashd/data), CLASHD_SHUTDOWN_GRACE_SECONDS (default 20;
#      keep the stop timeout / compose stop_grace_period at least 10 s above it).
# clashd reads both settings from the environment (a command-line flag or a --config file wins),
# so they are only given defaults here.
set -eu
bin_dir="$(dirname "$0")"
export CLASHD_DATA_DIR="${CLASHD_DATA_DIR:-/var/lib/clashd/data}"
export CLASHD_SHUTDOWN_GRACE_SECONDS="${CLASHD_SHUTDOWN_GRACE_SECONDS:-20}"
exec "$bin_dir/clashd" "$@"
