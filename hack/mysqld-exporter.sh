#!/usr/bin/env bash
# Builds Prometheus' mysqld_exporter from its Go module, once per version, into a cache folder
# that survives fresh clones, and prints the binary's path. `make bench-instance-metrics`
# runs it beside Dolphin's agent on the same server to compare what each costs per instance.
#
#   hack/mysqld-exporter.sh            build if missing, print the binary's path
#   hack/mysqld-exporter.sh --print    print the binary's path, build nothing
#
# Env: DOLPHIN_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/dolphin)
set -euo pipefail
source "$(dirname "$0")/lib/go-tool.sh"

# The version whose collector package the agent links (go.mod): the same collectors run
# either way. The proxy serves this version but does not list the module, hence
# go_tool_module.
MYSQLD_EXPORTER_VERSION=v0.16.0
go_tool_module mysqld_exporter "$MYSQLD_EXPORTER_VERSION" github.com/prometheus/mysqld_exporter \
  "-X github.com/prometheus/common/version.Version=${MYSQLD_EXPORTER_VERSION#v}" "seconds warm, a minute or two cold" -- "$@"
