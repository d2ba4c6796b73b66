#!/usr/bin/env bash
# Installs everything redirfs, its tests and its demo need on Debian 12 with
# Node 20, as root: the system packages listed below, npm dependencies, the
# native addon, and the TypeScript build (dist/ is built anew, so no stale output).
# Quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every system package the demo and the tests need, in one place:
#   build-essential, python3, pkg-config  node-gyp builds the native addon (g++, make)
#   libfuse3-dev                          the native FUSE server's headers and library
#   libfuse2, fuse3                       fuse-native's prebuilt addon links libfuse.so.2; fusermount3
#   kmod                                  modprobe fuse where /dev/fuse is missing
#   python3-torch ... python3-sklearn     PyTorch and the loaders the tests read with
#   util-linux-extra, openssl, curl       the tests' helpers (TLS certificates; curl: scripts/rgw.sh's readiness check)
#   python3-imageio, python3-skimage      more loaders the tests read with (without their
#                                         recommended packages, which are many and unused)
#   radosgw, ceph-mon, ceph-osd           Ceph's RADOS Gateway, the production S3 server the S3 tests
#                                         and the object bench run against (scripts/rgw.sh; no ceph-mgr
#                                         needed, nor the recommended packages)
#   python3-ffcv, python3-numba           FFCV, the loader the benchmark compares with (its
#                                         tests too); Debian's python3-ffcv omits numba
#   pyflakes3, shellcheck, clang-format   npm run lint's checkers for Python, shell and C++
#   clang, libclang-rt-14-dev, zlib1g-dev npm run build:asan / test:asan and the native fuzzers
#                                         (clang 14; its ASan/UBSan runtimes and libFuzzer are in
#                                         libclang-rt-14-dev, only recommended by clang; zlib's
#                                         CRC-32 is what the crc32 fuzzer checks ours against)
packages=(build-essential python3 pkg-config libfuse3-dev libfuse2 fuse3 kmod python3-torch python3-torchvision python3-pil python3-numpy python3-opencv python3-sklearn python3-ffcv python3-numba util-linux-extra openssl curl shellcheck pyflakes3 clang-format clang libclang-rt-14-dev zlib1g-dev)
lean_packages=(python3-imageio python3-skimage radosgw ceph-mon ceph-osd)
missing() {
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || echo "$package"
  done
}
updated=0
install() {
  [ $# -gt 1 ] || return 0
  local flags=$1; shift
  echo "setup: installing $*" >&2
  [ "$updated" = 1 ] || { apt-get update -qq; updated=1; }
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $flags "$@" >/dev/null
}
# The benchmark's object-storage profile compares redirfs with the FUSE mounts users have for buckets.
[ "${REDIRFS_SETUP_BENCH:-0}" = 1 ] && packages+=(s3fs rclone)
mapfile -t need < <(missing "${packages[@]}")
install "" "${need[@]}"
mapfile -t need < <(missing "${lean_packages[@]}")
install "--no-install-recommends" "${need[@]}"
# moto_server, a real S3-compatible server for the object-storage tests (test/helpers/s3-server.ts),
# with boto3, which those tests' helpers also use. Installed only where it is missing: pip needs PyPI,
# which a machine that already has it may not reach. (Debian's python3 is externally managed, so
# pip installs beside it, into /usr/local, only when told to.)
if ! command -v moto_server >/dev/null 2>&1; then
  python3 -m pip --version >/dev/null 2>&1 || install "" python3-pip
  echo "setup: installing moto[server] with pip (moto_server, for the S3 tests)" >&2
  python3 -m pip install -q 'moto[server]' 2>/dev/null || python3 -m pip install -q --break-system-packages 'moto[server]'
  command -v moto_server >/dev/null 2>&1 || { echo "setup: pip installed moto[server] but moto_server is not on PATH: add pip's script directory to PATH" >&2; exit 1; }
fi
[ -e /dev/fuse ] || modprobe fuse || { echo "setup: /dev/fuse is missing and 'modprobe fuse' failed: this machine cannot mount FUSE filesystems" >&2; exit 1; }

if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi

# The native addons (node-addon-api): the chunk reader and the FUSE server, against the installed Node's headers.
stale=0
for addon in native/build/Release/redirfs_native.node native/build/Release/redirfs_fuse.node; do
  [ -f "$addon" ] || stale=1
  for source in native/*.cc native/*.h native/binding.gyp; do [ "$source" -nt "$addon" ] && stale=1; done
done
[ "$stale" = 0 ] || bash scripts/build-native.sh

rm -rf dist
npx tsc -p tsconfig.json
