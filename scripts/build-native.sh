#!/usr/bin/env bash
# Builds the native addons (node-addon-api): the chunk reader and the FUSE
# server, in <dir> (default native/), against the installed Node's headers.
# Checks first for every tool and library the build needs, so that a
# missing one is named, with the Debian package that provides it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/native}

missing() { echo "setup: cannot build the native addons: $1; install Debian's $2 (scripts/setup.sh does)" >&2; exit 1; }
if ! command -v g++ >/dev/null || ! command -v make >/dev/null; then missing "no C++ compiler or make" build-essential; fi
command -v python3 >/dev/null || missing "node-gyp needs python3" python3
command -v pkg-config >/dev/null || missing "no pkg-config" pkg-config
pkg-config --exists fuse3 || missing "pkg-config finds no fuse3 (the FUSE server's headers and library)" libfuse3-dev

# Node's own headers, without network: next to this node binary (official builds ship them in
# include/node) or Debian's nodejs-dev under /usr/include/node.
prefix=$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")
if [ -f "$prefix/include/node/node.h" ]; then nodedir=$prefix
elif [ -f /usr/include/node/node.h ]; then nodedir=/usr
else missing "Node's headers (node.h) are neither next to $(command -v node) nor in /usr/include/node" "nodejs-dev (or use a Node build that ships its headers)"
fi

if ! (cd "$dir" && "$root/node_modules/.bin/node-gyp" rebuild --nodedir="$nodedir" > build.log 2>&1); then
  echo "setup: building the native addons failed; see $dir/build.log" >&2
  tail -n 5 "$dir/build.log" >&2
  exit 1
fi
