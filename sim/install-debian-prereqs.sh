#!/usr/bin/env bash
# The Debian packages the tests and the image build run, installed when missing (the one list;
# `make prereqs` and .ci/run call this). Root installs directly; others go through sudo.
#   mmdebstrap       resolves and downloads the image's Debian packages (any architecture)
#   skopeo           reads and pushes OCI archives (to the simulated cluster's registry)
#   runc             runs the image's root filesystem as the chart runs its containers
#   umoci            unpacks a pulled image into a root filesystem (the simulated kubelet)
#   docker-registry  each simulated cluster's registry on loopback (image and chart)
#   gcc              compiles the fake NVML library
set -euo pipefail

packages=(mmdebstrap skopeo runc umoci docker-registry gcc)
commands=(mmdebstrap skopeo runc umoci docker-registry gcc)

missing=()
for i in "${!commands[@]}"; do
  command -v "${commands[$i]}" >/dev/null 2>&1 || missing+=("${packages[$i]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing Debian packages: ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || {
    echo "not root and no sudo: install ${missing[*]} (apt-get install -y ${missing[*]})" >&2
    exit 1
  }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq "${missing[@]}" </dev/null
