#!/usr/bin/env bash
# Installs the AWS CLI and zstd from the distribution's packages (Debian/Ubuntu, apt) when one of
# them is not on PATH. make bench-backup runs them as the pipeline a team would write by
# hand with the same compression — mariadb-backup --stream | zstd | aws s3 cp - s3://…, and
# aws s3 cp s3://… - | zstd -d | mbstream -x — the second baseline Dolphin's backups are measured
# against. Nothing else needs them. Idempotent; uses sudo only when not run as root.
#
#   hack/install-pipeline-tools.sh
set -euo pipefail

bins=(aws zstd)
packages=(awscli zstd)
missing=()
for b in "${bins[@]}"; do
  command -v "$b" >/dev/null 2>&1 || missing+=("$b")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-pipeline-tools: already installed: $(command -v "${bins[@]}" | tr '\n' ' ')"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-pipeline-tools: ${missing[*]} missing and apt-get is not available: install them yourself" >&2
  exit 1
fi
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-pipeline-tools: not root and sudo is not available: run this script as root" >&2
    exit 1
  fi
  sudo=(sudo)
fi
for p in "${packages[@]}"; do
  candidate=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [[ -z "$candidate" || "$candidate" == "(none)" ]]; then
    echo "install-pipeline-tools: apt-get update (the package lists do not name $p)"
    "${sudo[@]}" apt-get update
    break
  fi
done
echo "install-pipeline-tools: apt-get install ${packages[*]}"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"
for b in "${bins[@]}"; do
  command -v "$b" >/dev/null 2>&1 || { echo "install-pipeline-tools: $b still missing" >&2; exit 1; }
done
echo "install-pipeline-tools: installed: $(command -v "${bins[@]}" | tr '\n' ' ')"
