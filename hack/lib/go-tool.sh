#!/usr/bin/env bash
# Sourced by the scripts that build a tool from the Go module proxy once per version into
# the user's cache folder (hack/versitygw.sh, hack/helm.sh).
#
#   go_tool NAME VERSION PACKAGE [LDFLAGS] [HINT] -- "$@"
#
# prints the binary's path ($cache/NAME/VERSION/NAME); with --print in the script's
# arguments it builds nothing. go install pkg@version builds outside any module, so this
# repository's go.mod is neither read nor changed; a lock keeps two callers from building at once.
go_tool() {
  local name=$1 version=$2 pkg=$3 ldflags=${4:-} hint=${5:-}
  shift 5
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
    trap "rm -rf '$tmp'" EXIT
    (cd "$tmp" && GOBIN="$tmp" GOFLAGS=-trimpath go install -ldflags "-s -w $ldflags" "$pkg@$version")
    mv "$tmp/$name" "$bin"
    echo ">> built $name in $((SECONDS - start))s" >&2
  fi
  echo "$bin"
}
