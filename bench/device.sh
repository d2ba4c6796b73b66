#!/usr/bin/env bash
# What the GPU machine runs (no network, no node, no libfuse3 there): unpacks .device/ (made by
# scripts/device-bundle.sh), checks that this redirfs runs, mounts and unmounts, then runs
# bench/gpu.py with the arguments given, and leaves in $OUT:
#   results.json, results.md   gpu.py's figures
#   device.log                 everything printed here (gpu.py's log included)
#   daemon-logs.txt            the tails of the redirfs daemons' logs and what was left mounted
#   env.txt                    the machine, the bundle, the tools found
# Every phase is bounded by timeout; anything mounted under the work directory is unmounted on exit.
# Usage: bash bench/device.sh [bench/gpu.py options]      (env: OUT, PYTHON, RFS_HOME, RFS_WORK,
#        DEVICE_TIMEOUT: seconds for gpu.py before it is killed, default its --budget + 90)
# shellcheck disable=SC2317  # unmount_leftovers and cleanup run from the EXIT trap
# shellcheck disable=SC2015  # `a && b || fail`: fail when either did, as meant
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-/tmp/redirfs-gpu-out}
mkdir -p "$OUT"
RFS=${RFS_HOME:-/tmp/rfs}
WORK=${RFS_WORK:-/tmp/redirfs-gpu}
PY=${PYTHON:-python3}
STARTED=$(date +%s)
exec 3>&1 4>&2
exec > >(tee -a "$OUT/device.log") 2>&1
TEE=$!
PRINTED=
say() { echo "[device $(date +%H:%M:%S) +$(( $(date +%s) - STARTED ))s] $*"; }
fail() { say "FAILED: $*"; exit 1; }

unmount_leftovers() {
  local m
  while read -r m <&5; do
    say "unmounting $m, left mounted"
    echo "left mounted: $m" >> "$OUT/daemon-logs.txt"
    timeout 30 redirfs umount --force "$m" || timeout 10 fusermount3 -uz "$m" || timeout 10 umount -l "$m"
  done 5< <(awk -v w="$WORK/" '$3 ~ /^fuse/ && index($2, w) == 1 { print $2 }' /proc/mounts)
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  say "cleanup (exit $rc)"
  unmount_leftovers
  if [ -f "$WORK/daemon.pids" ]; then
    local pid
    while read -r pid <&5; do
      local cmd
      cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)
      if [[ "$cmd" == *redirfs*" daemon "* ]]; then
        say "daemon $pid still running: stopping it"
        kill -TERM "$pid" 2>/dev/null; sleep 2; kill -KILL "$pid" 2>/dev/null
      fi
    done 5< <(sort -u "$WORK/daemon.pids")
  fi
  local f
  for f in "$WORK"/daemon-*.log; do
    [ -f "$f" ] || continue
    { echo "===== $f ($(wc -l < "$f") lines; the last 300)"; tail -n 300 "$f" | cut -c1-2000; } >> "$OUT/daemon-logs.txt"
  done
  [ -f "$OUT/daemon-logs.txt" ] && [ "$(stat -c %s "$OUT/daemon-logs.txt")" -gt 8000000 ] && \
    { tail -c 8000000 "$OUT/daemon-logs.txt" > "$OUT/daemon-logs.tmp"; mv "$OUT/daemon-logs.tmp" "$OUT/daemon-logs.txt"; }
  say "still mounted under $WORK: $(awk -v w="$WORK/" 'index($2, w) == 1' /proc/mounts | wc -l); took $(( $(date +%s) - STARTED )) s"
  [ -f "$OUT/results.md" ] && [ -z "$PRINTED" ] && { echo; cat "$OUT/results.md"; }
  ls -l "$OUT"
  exec 1>&3 2>&4  # let tee finish writing device.log and our stdout
  wait "$TEE" 2>/dev/null
  exit "$rc"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM

# ---------------------------------------------------------------- unpack
[ -f .device/node.xz ] && [ -f .device/redirfs.tar.xz ] || fail "no .device/ here: run scripts/device-bundle.sh and carry .device"
say "unpacking .device into $RFS"
rm -rf "$RFS" && mkdir -p "$RFS/sbin" || fail "cannot make $RFS"
timeout 120 tar -C "$RFS" -xJf .device/redirfs.tar.xz || fail "unpacking redirfs.tar.xz"
timeout 120 xz -dc .device/node.xz > "$RFS/sbin/node" && chmod 755 "$RFS/sbin/node" || fail "unpacking node"
export PATH="$RFS/sbin:$RFS/bin:$PATH"
export LD_LIBRARY_PATH="$RFS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# ---------------------------------------------------------------- checks
{
  echo "date: $(date -u +%FT%TZ)"; echo "uname: $(uname -a)"; grep PRETTY /etc/os-release 2>/dev/null
  echo "cpus: $(nproc)"; free -g 2>/dev/null | head -2; df -h / /tmp /var/tmp 2>/dev/null
  echo "bundle:"; cat .device/MANIFEST
  echo "node: $(command -v node) $(node --version 2>&1)"
  echo "redirfs: $(command -v redirfs) $(timeout 30 redirfs --version 2>&1)"
  echo "python: $(command -v "$PY") $(timeout 60 "$PY" -c 'import sys, torch, torchvision, PIL; print(sys.version.split()[0], torch.__version__, torchvision.__version__, PIL.__version__, "cuda", torch.cuda.is_available())' 2>&1)"
  echo "umount: $(command -v umount)  fusermount3: $(command -v fusermount3)  /dev/fuse: $(ls -l /dev/fuse 2>&1)"
  echo "redirfs_fuse.node links:"; ldd "$RFS/native/build/Release/redirfs_fuse.node" 2>&1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | head -3
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
[ "$(command -v node)" = "$RFS/sbin/node" ] || fail "node on PATH is $(command -v node), not the bundled one"
timeout 30 node --version > /dev/null || fail "the bundled node does not run here"
timeout 30 redirfs --version > /dev/null || fail "redirfs --version"
timeout 30 redirfs mount --help > /dev/null || fail "redirfs mount --help"
LINKS=$(ldd "$RFS/native/build/Release/redirfs_fuse.node" 2>&1)
case "$LINKS" in *"libfuse3.so.3 => $RFS/lib/libfuse3.so.3"*) ;; *) fail "redirfs_fuse.node does not find the bundled libfuse3: $LINKS" ;; esac
command -v umount > /dev/null || say "WARNING: no umount(8): redirfs umount will fail (gpu.py falls back to stopping the daemon)"

# ---------------------------------------------------------------- smoke: mount, read, stats, unmount
mkdir -p "$WORK" || fail "cannot make $WORK"
unmount_leftovers
rm -rf "$WORK"/daemon-*.log "$WORK/daemon.pids" "$WORK"/mnt-*
say "smoke test: a small mount"
SMOKE="$WORK/smoke"
rm -rf "$SMOKE" && mkdir -p "$SMOKE/src/a" "$SMOKE/src/b" "$SMOKE/mnt" || fail "cannot make $SMOKE"
for i in 0 1 2 3; do
  head -c 5000 /dev/urandom > "$SMOKE/src/a/$i.jpg"; head -c 5000 /dev/urandom > "$SMOKE/src/b/$i.jpg"
done
timeout 60 redirfs mount "$SMOKE/src" "$SMOKE/mnt" --memory 64M --log-file "$WORK/daemon-smoke.log" || fail "smoke mount"
DAEMON=$(timeout 20 redirfs stats --json "$SMOKE/mnt" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["pid"])')
say "daemon $DAEMON: exe $(readlink "/proc/$DAEMON/exe"), libfuse $(grep -o '/[^ ]*libfuse3[^ ]*' "/proc/$DAEMON/maps" | sort -u | tr '\n' ' ')"
echo "$DAEMON" >> "$WORK/daemon.pids"
[ "$(readlink "/proc/$DAEMON/exe")" = "$RFS/sbin/node" ] || fail "the daemon does not run the bundled node"
grep -q "$RFS/lib/libfuse3.so.3" "/proc/$DAEMON/maps" || fail "the daemon did not load the bundled libfuse3"
timeout 20 cat "$SMOKE"/mnt/a/*.jpg "$SMOKE"/mnt/b/*.jpg | wc -c | grep -qx 40000 || fail "smoke read"
timeout 20 redirfs stats "$SMOKE/mnt" | sed 's/^/  /'
timeout 60 redirfs umount "$SMOKE/mnt" || fail "smoke umount"
grep -q " $SMOKE/mnt " /proc/mounts && fail "smoke mount still mounted"
say "smoke test passed"

# ---------------------------------------------------------------- the benchmark
BUDGET=$("$PY" - "$@" <<'EOF'
import sys
a = sys.argv[1:]
print(next((a[i + 1] for i, x in enumerate(a[:-1]) if x == "--budget"), next((x.split("=", 1)[1] for x in a if x.startswith("--budget=")), "330")))
EOF
)
LIMIT=${DEVICE_TIMEOUT:-$(( ${BUDGET%.*} + 90 ))}
say "bench/gpu.py $* (budget $BUDGET s, killed after $LIMIT s)"
# The bundle's commit, as its MANIFEST names it (with its mark of changes, if any). The fixed options come last,
# so they win over the same given by hand: cleanup and $OUT rely on them.
REDIRFS_BENCH_COMMIT=$(sed -n 's/^built .* from //p' .device/MANIFEST) REDIRFS_BENCH_COMMAND="bash bench/device.sh${*:+ $*}" \
  timeout -k 30 "$LIMIT" "$PY" -u bench/gpu.py "$@" --redirfs "$RFS/bin/redirfs" --work "$WORK" --out "$OUT"
RC=$?
[ "$RC" -ne 137 ] && PRINTED=1  # gpu.py printed results.md itself (unless it was killed)
say "bench/gpu.py exited $RC"
exit $RC
