#!/usr/bin/env bash
# Installs what builds and runs QueueBox's container image when it is
# missing: the distribution's podman, and runc as its runtime (podman's
# default runtime, crun, refuses the cgroups of some hosts, such as v1 in
# hybrid mode; scripts/build-image.sh and the image's test run with runc).
# Also systemd-analyze, for the test that verifies the systemd unit in
# deploy/systemd. Idempotent: does nothing when all of them are there.
set -euo pipefail

missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
# systemd-analyze comes with systemd itself.
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "${missing[*]} not found; installing the distribution's packages ..." >&2
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: no apt-get here. Install ${missing[*]} with your package manager (podman 4 or later builds the image; runc runs it)." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "error: installing packages needs root; run: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# Other installs may hold the package lock for a while: wait for it.
apt=($SUDO apt-get -o DPkg::Lock::Timeout=600)
"${apt[@]}" update -qq
"${apt[@]}" install -y -qq "${missing[@]}" >/dev/null
for c in podman runc systemd-analyze; do
  command -v "$c" >/dev/null 2>&1 || { echo "error: the install finished but $c is still missing" >&2; exit 1; }
done
echo "${missing[*]} installed." >&2
