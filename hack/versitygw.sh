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

VERSITYGW_VERSION=v1.8.0
cache=${DOLPHIN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dolphin}
out="$cache/versitygw/$VERSITYGW_VERSION"
bin="$out/versitygw"

if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi

mkdir -p "$out"
# A lock so that two concurrent callers (make test run twice) do not build the
# same binary twice.
exec 9>"$out/.lock"
flock 9

if [[ ! -x "$bin" ]]; then
  echo ">> building versitygw $VERSITYGW_VERSION (a cold build takes 70-110 s on 2 cores)" >&2
  start=$SECONDS
  tmp=$(mktemp -d "$out/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # go install pkg@version builds outside any module, so this repository's
  # go.mod is neither read nor changed.
  (cd "$tmp" && GOBIN="$tmp" GOFLAGS=-trimpath go install -ldflags "-s -w" \
    "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION")
  mv "$tmp/versitygw" "$bin"
  echo ">> built versitygw in $((SECONDS - start))s" >&2
fi

echo "$bin"
