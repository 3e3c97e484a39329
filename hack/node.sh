#!/usr/bin/env bash
# Builds (once per version, cached) and installs what a real Kubernetes node needs on this
# machine, without Docker: containerd + ctr + its runc shim from containerd's Go module,
# kubelet and kube-proxy from the same k8s.io/kubernetes tools module as the control plane
# (hack/k8s), CoreDNS from its Go module; runc, the CNI plugins (bridge, host-local, portmap,
# loopback), iptables and mmdebstrap (the MariaDB images' root file systems) from Debian.
# Prints the folder with the built binaries on stdout. See docs/design/0047-real-node.md.
#
#   hack/node.sh            install and build what is missing, print the folder
#   hack/node.sh --print    print the folder, build nothing
#
# Env: DOLPHIN_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/dolphin)
set -euo pipefail

K8S_VERSION=v1.37.2 # the control plane's version (hack/control-plane.sh)
CONTAINERD_VERSION=v2.4.2
COREDNS_VERSION=v1.15.0
here=$(cd "$(dirname "$0")" && pwd)
cache=${DOLPHIN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dolphin}
out="$cache/node/k8s-$K8S_VERSION-containerd-$CONTAINERD_VERSION-coredns-$COREDNS_VERSION"

if [[ "${1:-}" == "--print" ]]; then echo "$out"; exit 0; fi

# --- Debian packages -------------------------------------------------------------------------
# runc (the OCI runtime containerd's shim calls), the CNI plugins, iptables (kube-proxy's
# iptables mode, through iptables-nft) and mmdebstrap (make images). Idempotent.
deb_bins=(/usr/sbin/runc /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/portmap
  /usr/lib/cni/loopback /usr/sbin/iptables /usr/bin/mmdebstrap)
deb_packages=(runc containernetworking-plugins iptables mmdebstrap)
missing_deb=()
for b in "${deb_bins[@]}"; do [[ -x "$b" ]] || missing_deb+=("$b"); done
if ((${#missing_deb[@]})); then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "node: ${missing_deb[*]} missing and apt-get is not available: install ${deb_packages[*]} yourself" >&2
    exit 1
  fi
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
  need_update=
  for p in "${deb_packages[@]}"; do
    candidate=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [[ -z "$candidate" || "$candidate" == "(none)" ]]; then need_update=1; fi
  done
  if [[ -n "$need_update" ]]; then "${sudo[@]}" apt-get update >&2; fi
  echo "node: apt-get install ${deb_packages[*]}" >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${deb_packages[@]}" >&2
  for b in "${deb_bins[@]}"; do
    [[ -x "$b" ]] || { echo "node: installed ${deb_packages[*]} but $b is still missing" >&2; exit 1; }
  done
fi

# --- Go binaries, cached by version -----------------------------------------------------------
mkdir -p "$out"
# A lock so that two concurrent callers do not build the same binaries twice.
exec 9>"$out/.lock"
flock 9

tmp=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [[ ! -x "$out/containerd" || ! -x "$out/ctr" || ! -x "$out/containerd-shim-runc-v2" ]]; then
  echo ">> building containerd $CONTAINERD_VERSION (cold: ~2.5 min on 2 cores)" >&2
  start=$SECONDS
  # Static, without the snapshotters that need C libraries; go install pkg@version builds
  # outside this repository's module.
  (cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-trimpath go install \
    -tags "no_btrfs no_devmapper no_zfs" -ldflags "-s -w" \
    "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION")
  mv "$tmp/containerd" "$tmp/ctr" "$tmp/containerd-shim-runc-v2" "$out/"
  echo ">> built containerd in $((SECONDS - start))s" >&2
fi

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldf="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldf+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldf+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
for b in kubelet kube-proxy; do
  [[ -x "$out/$b" ]] && continue
  echo ">> building $b $K8S_VERSION (cold: kubelet ~4 min, kube-proxy ~1 min on 2 cores)" >&2
  start=$SECONDS
  (cd "$here/k8s" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldf" -o "$tmp/$b" "k8s.io/kubernetes/cmd/$b")
  mv "$tmp/$b" "$out/$b"
  echo ">> built $b in $((SECONDS - start))s" >&2
done

if [[ ! -x "$out/coredns" ]]; then
  echo ">> building CoreDNS $COREDNS_VERSION (cold: ~4 min on 2 cores)" >&2
  start=$SECONDS
  (cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-trimpath go install -ldflags "-s -w" \
    "github.com/coredns/coredns@$COREDNS_VERSION")
  mv "$tmp/coredns" "$out/coredns"
  echo ">> built CoreDNS in $((SECONDS - start))s" >&2
fi

echo "$out"
