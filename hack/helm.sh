#!/usr/bin/env bash
# Builds the helm command from the Go module proxy (helm.sh/helm/v4, the same version the
# chart tests and the Helm e2e link), once per version, into a cache folder that survives
# fresh clones. Prints the binary's path on stdout. For users without helm, and for the
# transcripts in docs/install.md.
#
#   hack/helm.sh            build if missing, print the binary's path
#   hack/helm.sh --print    print the binary's path, build nothing
#
# Env: DOLPHIN_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/dolphin)
set -euo pipefail

# Keep in step with helm.sh/helm/v4 in go.mod (a test in internal/chartgen checks).
HELM_VERSION=v4.3.2
cache=${DOLPHIN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dolphin}
out="$cache/helm/$HELM_VERSION"
bin="$out/helm"

if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi

mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

if [[ ! -x "$bin" ]]; then
  echo ">> building helm $HELM_VERSION (about 25 s warm, a few minutes cold on 2 cores)" >&2
  start=$SECONDS
  tmp=$(mktemp -d "$out/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # go install pkg@version builds outside any module: this repository's go.mod is neither
  # read nor changed.
  (cd "$tmp" && GOBIN="$tmp" GOFLAGS=-trimpath go install -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION")
  mv "$tmp/helm" "$bin"
  echo ">> built helm in $((SECONDS - start))s" >&2
fi

echo "$bin"
