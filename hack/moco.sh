#!/usr/bin/env bash
# Builds MOCO's controller (cybozu-go/moco, a peer operator) from Go modules,
# once per version, into a cache folder that survives fresh clones, for the
# side-by-side footprint bench (make bench-footprint). Prints the binary's path
# on stdout. The version is the one hack/moco/go.mod requires.
#
#   hack/moco.sh            build if missing, print the binary's path
#   hack/moco.sh --print    print the binary's path, build nothing
#
# Env: DOLPHIN_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/dolphin)
set -euo pipefail

MOCO_VERSION=v0.36.0
here=$(cd "$(dirname "$0")" && pwd)
cache=${DOLPHIN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dolphin}
out="$cache/moco/$MOCO_VERSION"
bin="$out/moco-controller"

if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi

if ! grep -q "github.com/cybozu-go/moco $MOCO_VERSION\$" "$here/moco/go.mod"; then
  echo "hack/moco/go.mod does not require github.com/cybozu-go/moco $MOCO_VERSION" >&2
  exit 1
fi

mkdir -p "$out"
# A lock so that two concurrent callers do not build the same binary twice.
exec 9>"$out/.lock"
flock 9

if [[ ! -x "$bin" ]]; then
  echo ">> building moco-controller $MOCO_VERSION (a cold build takes 2-16 min on 2 cores, depending on load)" >&2
  start=$SECONDS
  # go install pkg@version is refused (listing MOCO's versions fails), so the
  # tools module hack/moco pins it.
  (cd "$here/moco" && go build -trimpath -o "$bin.tmp" github.com/cybozu-go/moco/cmd/moco-controller)
  mv "$bin.tmp" "$bin"
  echo ">> built moco-controller in $((SECONDS - start))s" >&2
fi

echo "$bin"
