#!/usr/bin/env bash
# Builds versitygw (an S3-compatible gateway, used as the real S3 server of the
# objectstore tests) from the Go module proxy, once per version, into a cache
# folder that survives fresh clones. Prints the binary's path on stdout.
#
#   hack/versitygw.sh            build if missing, print the binary's path
#   hack/versitygw.sh --print    print the binary's path, build nothing
#
# Env: DOLPHIN_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/dolphin)
set -euo pipefail
source "$(dirname "$0")/lib/go-tool.sh"

VERSITYGW_VERSION=v1.8.0
go_tool versitygw "$VERSITYGW_VERSION" github.com/versity/versitygw/cmd/versitygw "" \
  "a cold build takes 70-110 s on 2 cores" -- "$@"
