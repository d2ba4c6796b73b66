#!/usr/bin/env bash
# Installs everything redirfs, its tests and its demo need on Debian 12 with
# Node 20, as root: FUSE 2 (fuse-native's prebuilt addon links libfuse.so.2), openssl (TLS tests),
# PyTorch from Debian, npm dependencies, and the TypeScript build.
# Quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(libfuse2 fuse3 python3-torch python3-torchvision python3-pil python3-numpy python3-opencv python3-sklearn util-linux-extra openssl)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
[ -e /dev/fuse ] || modprobe fuse

if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi

# The native chunk reader (node-addon-api), against the installed Node's headers.
addon=native/build/Release/redirfs_native.node
if [ ! -f "$addon" ] || [ native/redirfs_native.cc -nt "$addon" ] || [ native/binding.gyp -nt "$addon" ]; then
  nodedir=()
  [ -f /usr/include/node/node.h ] && nodedir=(--nodedir=/usr)
  if ! (cd native && ../node_modules/.bin/node-gyp rebuild "${nodedir[@]}" > build.log 2>&1); then
    echo "setup: building the native chunk reader failed (it needs g++, make, python3 and Node's headers); see native/build.log" >&2
    exit 1
  fi
fi

npx tsc -p tsconfig.json
