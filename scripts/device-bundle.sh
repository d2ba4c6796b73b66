#!/usr/bin/env bash
# Builds .device/ in the repo root: what a machine without network, node or libfuse3 needs
# to run this checkout's redirfs (bench/device.sh unpacks it there):
#   .device/node.xz          this machine's node binary (glibc-dynamic; glibc and libstdc++ only)
#   .device/redirfs.tar.xz   a package root: package.json, bin/, dist/, proto/, native/build/Release/*.node,
#                            node_modules/ (runtime dependencies only), lib/libfuse3.so.3 and lib/libfuse.so.2
#                            (fuse-native's), sbin/fusermount3
#   .device/MANIFEST         where each piece came from, with checksums
# Set up first (npm run setup: native/build/Release); dist/ is built again here from src/, so the bundle
# runs the commit its MANIFEST names. The whole must stay under 55 MiB.
# Usage: bash scripts/device-bundle.sh   (XZ_THREADS=2 by default)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUTDIR="$ROOT/.device"
THREADS=${XZ_THREADS:-2}
LIMIT=$((55 * 1024 * 1024))

die() { echo "device-bundle: $*" >&2; exit 1; }
NODE=$(command -v node) || die "no node on PATH"
NODE=$(readlink -f "$NODE")
LIBFUSE=$(readlink -f /lib/x86_64-linux-gnu/libfuse3.so.3 2>/dev/null || true)
[ -f "$LIBFUSE" ] || LIBFUSE=$(ldconfig -p | awk '/libfuse3\.so\.3 / {print $NF; exit}')
if [ -z "$LIBFUSE" ] || [ ! -f "$LIBFUSE" ]; then die "libfuse3.so.3 not found"; fi
FUSERMOUNT=$(command -v fusermount3 || true)
npx tsc -p tsconfig.json
for f in dist/cli/main.js native/build/Release/redirfs_fuse.node native/build/Release/redirfs_native.node bin/redirfs package.json; do
  [ -e "$f" ] || die "$f is missing: build first (npm run setup)"
done
# The bundled node must need nothing but glibc and libstdc++ (which every glibc distribution has).
if ldd "$NODE" | grep -Ev 'linux-vdso|ld-linux|lib(c|m|dl|pthread|rt|stdc\+\+|gcc_s)\.so' | grep -q .; then
  ldd "$NODE" >&2; die "$NODE links libraries a bare machine may lack"
fi

STAGE=$(mktemp -d /tmp/redirfs-device-stage.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
PKG="$STAGE/pkg"
mkdir -p "$PKG/native/build/Release" "$PKG/lib" "$PKG/sbin"

cp -a package.json bin dist proto "$PKG/"
cp -a native/build/Release/redirfs_fuse.node native/build/Release/redirfs_native.node "$PKG/native/build/Release/"
cp -L "$LIBFUSE" "$PKG/lib/libfuse3.so.3"
# fuse-native (a runtime dependency the CLI loads at start) links libfuse 2.
LIBFUSE2=$(ldconfig -p | awk '/libfuse\.so\.2 / {print $NF; exit}')
if [ -z "$LIBFUSE2" ] || [ ! -f "$LIBFUSE2" ]; then die "libfuse.so.2 not found (Debian: libfuse2)"; fi
cp -L "$LIBFUSE2" "$PKG/lib/libfuse.so.2"
[ -n "$FUSERMOUNT" ] && cp -L "$FUSERMOUNT" "$PKG/sbin/fusermount3" && chmod 755 "$PKG/sbin/fusermount3"

# Runtime dependencies only: the packages `npm ls --omit=dev` lists, each without its nested
# node_modules (a nested package that is a runtime dependency is listed, and copied, itself).
LIST="$STAGE/files"
npm ls --omit=dev --all --parseable 2>/dev/null | sed 1d | sort -u | while read -r dir; do
  rel=${dir#"$ROOT"/}
  case "$rel" in node_modules/*) ;; *) die "unexpected package path $dir" ;; esac
  find "$rel" -path "$rel/node_modules" -prune -o \( -type f -o -type l \) -print
done > "$LIST"
[ -s "$LIST" ] || die "npm ls listed no runtime packages"
tar -C "$ROOT" -cf - --no-recursion -T "$LIST" | tar -C "$PKG" -xf -
PACKAGES=$(npm ls --omit=dev --all --parseable 2>/dev/null | sed 1d | sort -u | wc -l)

# Prove the staged package works on its own (this node, the copied node_modules), before packing it.
"$NODE" "$PKG/bin/redirfs" --version > "$STAGE/version" || die "the staged package does not run"
(cd "$PKG" && "$NODE" -e "require('./dist/cli/main.js'); require('./dist/daemon/daemon.js'); require('./native/build/Release/redirfs_native.node')") \
  || die "the staged package cannot load its modules"

# node.xz of the same node binary is kept from the last bundle (compressing it is most of the time).
NODE_SHA=$(sha256sum "$NODE" | cut -d' ' -f1)
if [ -f "$OUTDIR/node.xz" ] && grep -qx "node sha256 $NODE_SHA" "$OUTDIR/MANIFEST" 2>/dev/null \
   && [ "$(xz -dc "$OUTDIR/node.xz" | sha256sum | cut -d' ' -f1)" = "$NODE_SHA" ]; then
  mv "$OUTDIR/node.xz" "$STAGE/node.xz"
fi
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"
echo "device-bundle: compressing the package ($(du -sh "$PKG" | cut -f1), $PACKAGES runtime packages) and node ($(du -h "$NODE" | cut -f1)) with xz -T$THREADS"
if [ -f "$STAGE/node.xz" ]; then
  echo "device-bundle: node.xz kept from the last bundle (same node)"
  mv "$STAGE/node.xz" "$OUTDIR/node.xz"
else
  xz -T"$THREADS" -9 -c "$NODE" > "$OUTDIR/node.xz"
fi
tar -C "$PKG" -cf - . | xz -T"$THREADS" -9 -c > "$OUTDIR/redirfs.tar.xz"
{
  echo "built $(date -u +%FT%TZ) on $(uname -n) from $(git rev-parse --short HEAD)$(git status --porcelain --untracked-files=no -- src native bin package.json | grep -q . && echo ' (with uncommitted changes)')"
  echo "redirfs $(cat "$STAGE/version"), node $("$NODE" --version) from $NODE, libfuse3 from $LIBFUSE, fusermount3 from ${FUSERMOUNT:-none}"
  echo "runtime packages: $PACKAGES"
  (cd "$OUTDIR" && sha256sum node.xz redirfs.tar.xz)
  echo "node sha256 $NODE_SHA"
} > "$OUTDIR/MANIFEST"
cat "$OUTDIR/MANIFEST"
TOTAL=$(du -cb "$OUTDIR"/* | tail -1 | cut -f1)
ls -l "$OUTDIR"
echo "device-bundle: .device/ is $(awk -v b="$TOTAL" 'BEGIN { printf "%.1f MiB", b / 1048576 }') ($TOTAL bytes)"
[ "$TOTAL" -lt "$LIMIT" ] || die "over the 55 MiB limit"
