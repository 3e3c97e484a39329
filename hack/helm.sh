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
source "$(dirname "$0")/lib/go-tool.sh"

# Keep in step with helm.sh/helm/v4 in go.mod (a test in internal/chartgen checks).
HELM_VERSION=v4.3.2
go_tool helm "$HELM_VERSION" helm.sh/helm/v4/cmd/helm "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
  "about 25 s warm, a few minutes cold on 2 cores" -- "$@"
