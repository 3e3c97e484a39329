#!/usr/bin/env bash
# Sourced by the scripts that build a tool from the Go module proxy once per version into
# the user's cache folder (hack/versitygw.sh, hack/helm.sh, hack/mysqld-exporter.sh).
#
#   go_tool NAME VERSION PACKAGE [LDFLAGS] [HINT] -- "$@"
#   go_tool_module NAME VERSION MODULE [LDFLAGS] [HINT] -- "$@"
#
# print the binary's path ($cache/NAME/VERSION/NAME); with --print in the script's
# arguments they build nothing. go_tool runs go install pkg@version, outside any module, so
# this repository's go.mod is neither read nor changed. go_tool_module builds the main
# package at the root of MODULE@VERSION in a copy of the module with its own go.mod and go.sum:
# for modules the proxy serves but will not list (go install pkg@version then fails with
# "403 ... /@v/list"). A lock keeps two callers from building at once.
go_tool() { _go_tool_cached _go_tool_install "$@"; }
go_tool_module() { _go_tool_cached _go_tool_copy_and_build "$@"; }

_go_tool_cached() {
  local build=$1 name=$2 version=$3 pkg=$4 ldflags=${5:-} hint=${6:-}
  shift 6
  [[ "${1:-}" == "--" ]] && shift
  local cache=${DOLPHIN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dolphin}
  local out="$cache/$name/$version"
  local bin="$out/$name"
  if [[ "${1:-}" == "--print" ]]; then echo "$bin"; return 0; fi
  mkdir -p "$out"
  exec 9>"$out/.lock"
  flock 9
  if [[ ! -x "$bin" ]]; then
    echo ">> building $name $version${hint:+ ($hint)}" >&2
    local start=$SECONDS tmp
    tmp=$(mktemp -d "$out/.build.XXXXXX")
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "chmod -R u+w '$tmp' 2>/dev/null; rm -rf '$tmp'" EXIT
    "$build" "$tmp" "$name" "$pkg" "$version" "$ldflags"
    mv "$tmp/$name" "$bin"
    echo ">> built $name in $((SECONDS - start))s" >&2
  fi
  echo "$bin"
}

# _go_tool_install TMP NAME PACKAGE VERSION LDFLAGS: go install into TMP.
_go_tool_install() {
  (cd "$1" && GOBIN="$1" GOFLAGS=-trimpath go install -ldflags "-s -w $5" "$3@$4")
}

# _go_tool_copy_and_build TMP NAME MODULE VERSION LDFLAGS: the module's root package, built in
# a writable copy of the module (the module cache is read-only) to TMP/NAME. GOWORK=off: no
# go.work above the copy joins the build.
_go_tool_copy_and_build() {
  local json dir
  if ! json=$(cd "$1" && GOFLAGS= GOWORK=off go mod download -json "$3@$4"); then
    printf '%s\n' "$json" >&2
    echo "go mod download $3@$4 failed" >&2
    return 1
  fi
  dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  if [[ -z "$dir" || ! -d "$dir" ]]; then
    printf '%s\n' "$json" >&2
    echo "go mod download $3@$4 named no folder" >&2
    return 1
  fi
  cp -r "$dir" "$1/src"
  chmod -R u+w "$1/src"
  (cd "$1/src" && GOWORK=off GOFLAGS=-trimpath go build -ldflags "-s -w $5" -o "$1/$2" .)
}
