#!/usr/bin/env bash
# Installs the MariaDB server binaries that the real-server tests
# (internal/dbsql/dbtest) start on loopback addresses: mariadbd,
# mariadb-install-db, the client and mariadb-backup, from the distribution's
# packages (Debian/Ubuntu, apt), and sysbench, the real client of the benches.
# Idempotent: does nothing when all of them are already installed.
#
#   hack/install-mariadb.sh
#
# It never starts a MariaDB service: the tests start their own servers, each
# with its own data directory. Uses sudo only when not run as root.
set -euo pipefail

# find_bin NAME: print the path of NAME on PATH or in /usr/sbin (not always on
# a normal user's PATH), or fail.
find_bin() {
  if command -v "$1" >/dev/null 2>&1; then command -v "$1"; return 0; fi
  if [[ -x "/usr/sbin/$1" ]]; then echo "/usr/sbin/$1"; return 0; fi
  return 1
}

# ip (iproute2) is for the local node's pod network (dolphin local and its tests); tc (also
# iproute2) and nft (nftables) inject network delay and packet loss in the chaos suite (netem
# where the kernel has it; nft's random drop works on any kernel with nf_tables); sysbench is
# the real client the client-view benches and the chaos suite drive through the primary Service.
# mkfs.ext4 and resize2fs (e2fsprogs), losetup, findmnt, fallocate and mount (util-linux, mount)
# make and fill the local node's sized volumes (dolphin-local-sized: the chaos cluster's disks).
bins=(mariadbd mariadb-install-db mariadb mariadb-binlog mariadb-backup ip nsenter tc nft sysbench
  mkfs.ext4 resize2fs losetup findmnt fallocate mount)

# all_found: true when every one of bins is installed; lists them in $found.
all_found() {
  found=()
  local b path
  for b in "${bins[@]}"; do
    path=$(find_bin "$b") || return 1
    found+=("$path")
  done
}

if all_found; then
  echo "install-mariadb: already installed, nothing to do: ${found[*]}"
  echo "install-mariadb: $("${found[0]}" --version)"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-mariadb: one of ${bins[*]} is missing and apt-get is not available;" >&2
  echo "install-mariadb: install MariaDB 10.11 or later (mariadb-server, mariadb-client, mariadb-backup) yourself" >&2
  exit 1
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-mariadb: not root and sudo is not available: run this script as root" >&2
    exit 1
  fi
  sudo=(sudo)
fi

packages=(mariadb-server mariadb-client mariadb-backup iproute2 util-linux mount e2fsprogs nftables sysbench procps)

# Keep package scripts from starting the server: invoke-rc.d and
# deb-systemd-invoke ask /usr/sbin/policy-rc.d, and exit code 101 means
# "action forbidden". Only when there is no policy already; removed on exit.
policy=/usr/sbin/policy-rc.d
added_policy=
cleanup() {
  if [[ -n "$added_policy" ]]; then
    "${sudo[@]}" rm -f "$policy"
    echo "install-mariadb: removed the temporary $policy"
  fi
}
trap cleanup EXIT
if [[ ! -e "$policy" ]]; then
  printf '#!/bin/sh\n# Temporary, from hack/install-mariadb.sh: start no services.\nexit 101\n' |
    "${sudo[@]}" tee "$policy" >/dev/null
  "${sudo[@]}" chmod 755 "$policy"
  added_policy=1
  echo "install-mariadb: wrote a temporary $policy so that no service is started"
fi

# apt-get update only when apt does not know a candidate for every package
# (a fresh container has empty package lists).
need_update=
for p in "${packages[@]}"; do
  candidate=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [[ -z "$candidate" || "$candidate" == "(none)" ]]; then need_update=1; fi
done
if [[ -n "$need_update" ]]; then
  echo "install-mariadb: apt-get update (package lists do not name ${packages[*]})"
  "${sudo[@]}" apt-get update
else
  echo "install-mariadb: package lists are current enough, skipping apt-get update"
fi

echo "install-mariadb: apt-get install ${packages[*]}"
start=$SECONDS
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${packages[@]}"

if ! all_found; then
  echo "install-mariadb: installed ${packages[*]} but one of ${bins[*]} is still missing" >&2
  exit 1
fi
echo "install-mariadb: installed in $((SECONDS - start))s: ${found[*]}"
echo "install-mariadb: $("${found[0]}" --version)"
