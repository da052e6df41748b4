#!/bin/sh
# The container's entrypoint (installed as PREFIX/bin/clashd-entrypoint): clashd with its data
# under the volume and the shutdown grace period the container's stop timeout is sized for; the
# arguments (the image's CMD, or those given to `docker run`) add the listener, TLS and tokens.
# exec: clashd itself receives SIGTERM from `docker stop`.
# Env: CLASHD_DATA_DIR (default /var/lib/clashd/data), CLASHD_SHUTDOWN_GRACE_SECONDS (default 20;
#      keep the stop timeout / compose stop_grace_period at least 10 s above it).
# A --data-dir, --shutdown-grace-seconds or --config among the arguments wins: the defaults are
# then not passed (clashd refuses a flag given twice, and a config file's values would be
# overridden).
set -eu
bin_dir="$(dirname "$0")"
data=1
grace=1
for arg in "$@"; do
  case "$arg" in
    --data-dir | --data-dir=*) data=0 ;;
    --shutdown-grace-seconds | --shutdown-grace-seconds=*) grace=0 ;;
    --config | --config=*) data=0 grace=0 ;;
  esac
done
if [ "$grace" = 1 ]; then
  set -- --shutdown-grace-seconds "${CLASHD_SHUTDOWN_GRACE_SECONDS:-20}" "$@"
fi
if [ "$data" = 1 ]; then
  set -- --data-dir "${CLASHD_DATA_DIR:-/var/lib/clashd/data}" "$@"
fi
exec "$bin_dir/clashd" "$@"
