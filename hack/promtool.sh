#!/usr/bin/env bash
# Provides promtool, which checks and unit-tests Dolphin's alert rules (config/prometheus):
# taken out of Debian's prometheus package without installing it (apt-get download, dpkg-deb
# -x: no Prometheus service is set up or started), cached per package version; on a machine
# without apt, built from the Prometheus Go module instead (about 4 minutes on 2 cores).
# Prints the binary's path on stdout.
#
#   hack/promtool.sh            provide if missing, print the path
#   hack/promtool.sh --print    print the path of the cached one, provide nothing
#
# Env: DOLPHIN_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/dolphin)
set -euo pipefail

PROMETHEUS_MODULE_VERSION=v0.316.0 # the Go module's version of Prometheus 3.x, for the fallback
cache=${DOLPHIN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dolphin}/promtool

# version: Debian's candidate version of prometheus, or the module's without apt.
version() {
  if command -v apt-cache >/dev/null 2>&1; then
    local v
    v=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [[ -z "$v" || "$v" == "(none)" ]]; then
      SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
      $SUDO apt-get update -qq >&2
      v=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
    fi
    if [[ -n "$v" && "$v" != "(none)" ]]; then echo "debian-$v"; return; fi
  fi
  echo "module-$PROMETHEUS_MODULE_VERSION"
}

if [[ "${1:-}" == "--print" ]]; then
  # The newest cached one: --print never asks apt.
  found=$(ls -1td "$cache"/*/promtool 2>/dev/null | head -n 1 || true)
  echo "${found:-$cache/none/promtool}"
  exit 0
fi

v=$(version)
out="$cache/$v"
bin="$out/promtool"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
if [[ ! -x "$bin" ]]; then
  tmp=$(mktemp -d "$out/.get.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  start=$SECONDS
  if [[ "$v" == debian-* ]]; then
    echo ">> promtool from Debian's prometheus ${v#debian-} (downloaded, not installed)" >&2
    (cd "$tmp" && apt-get download -q prometheus >&2 2>/dev/null || (cd "$tmp" && apt-get download prometheus >&2))
    dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
    mv "$tmp/x/usr/bin/promtool" "$bin"
  else
    echo ">> building promtool from github.com/prometheus/prometheus $PROMETHEUS_MODULE_VERSION (about 4 min on 2 cores)" >&2
    (cd "$tmp" && GOBIN="$tmp" GOFLAGS=-trimpath go install -ldflags "-s -w" \
      "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION")
    mv "$tmp/promtool" "$bin"
  fi
  echo ">> promtool ready in $((SECONDS - start))s" >&2
fi
echo "$bin"
