#!/usr/bin/env bash
# Builds golangci-lint from the Go module proxy at a pinned version, once, into a cache folder
# that survives fresh clones (go install outside this module: go.mod is neither read nor
# changed). Prints the binary's path on stdout. `make lint` runs it with .golangci.yml.
#
#   hack/golangci-lint.sh            build if missing, print the binary's path
#   hack/golangci-lint.sh --print    print the binary's path, build nothing
#
# Env: DOLPHIN_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/dolphin)
set -euo pipefail
source "$(dirname "$0")/lib/go-tool.sh"

GOLANGCI_LINT_VERSION=v2.15.0
go_tool golangci-lint "$GOLANGCI_LINT_VERSION" github.com/golangci/golangci-lint/v2/cmd/golangci-lint \
  "-X main.version=$GOLANGCI_LINT_VERSION" "a few minutes cold on 2 cores" -- "$@"
