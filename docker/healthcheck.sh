#!/bin/sh
# The container's HEALTHCHECK (installed as PREFIX/bin/clashd-healthcheck): grpc.health.v1 through
# `clashctl health`, which exits 0 only when the server answers SERVING, asked about
# clash.v1.PartService, the service that turns NOT_SERVING when CAD imports cannot run (no worker,
# or workers that fail to start: a missing shared library); it answers NOT_SERVING when the whole
# server is draining too.
# Env: CLASHD_HEALTH_ADDRESS (default 127.0.0.1:50051);
#      CLASHD_HEALTH_ARGS: extra clashctl options, split on spaces, e.g. for a TLS listener
#      "--tls --tls-ca /run/secrets/clashd_ca.pem --tls-server-name clashd.example.org".
set -eu
bin_dir="$(dirname "$0")"
# shellcheck disable=SC2086  # CLASHD_HEALTH_ARGS is a list of options
exec "$bin_dir/clashctl" --server "${CLASHD_HEALTH_ADDRESS:-127.0.0.1:50051}" --timeout 5 \
  ${CLASHD_HEALTH_ARGS:-} health --service clash.v1.PartService
