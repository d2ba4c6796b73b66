#!/usr/bin/env bash
# What a mount of a pack in a bucket holds above its --memory: a pack is put
# in a single-node Ceph RGW (scripts/rgw.sh) and mounted, 8 readers `cat`
# every sample in a shuffled order for a few epochs, and the daemon's peak
# RSS (VmHWM) is printed beside --memory, with its own view of what it held
# (sample buffers, JS heap, other ArrayBuffers) sampled each second.
# Straight from the server on loopback: no link, no cgroup; a figure of the
# daemon's memory, not of speed.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bash bench/bucket-memory.sh [--pack DIR] [--memory SIZE] [--epochs N]
  --pack DIR     a pack made by `redirfs pack` (default: bench/data/jpeg-750M-16c-s0.pack-k64,
                 which python3 bench/objects.py makes)
  --memory SIZE  the mount's --memory (default: a quarter of the pack's segments)
  --epochs N     epochs to read (default 3)
EOF
}

cd "$(dirname "$0")/.."
pack=bench/data/jpeg-750M-16c-s0.pack-k64
memory=''
epochs=3
while [ $# -gt 0 ]; do
  case "$1" in
    --pack) pack=${2:?--pack needs a directory}; shift 2 ;;
    --memory) memory=${2:?--memory needs a size}; shift 2 ;;
    --epochs) epochs=${2:?--epochs needs a number}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bucket-memory.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
[ -f "$pack/index.bin" ] || { echo "bucket-memory.sh: $pack is not a pack (no index.bin): make one with python3 bench/objects.py or redirfs pack" >&2; exit 2; }
[[ "$epochs" =~ ^[1-9][0-9]*$ ]] || { echo "bucket-memory.sh: --epochs must be a whole number of at least 1" >&2; exit 2; }
if [ -z "$memory" ]; then memory=$(( $(du -sb "$pack/segments" | cut -f1) / 4 )); fi

work=$(mktemp -d /tmp/redirfs-bucket-memory-XXXXXX)
mountpoint=$work/mnt
mkdir -p "$mountpoint"
cleanup() {
  fusermount3 -u "$mountpoint" 2>/dev/null || true
  bash scripts/rgw.sh down "$work/rgw" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

server=$(bash scripts/rgw.sh up "$work/rgw" --owner $$ --memory $((4 << 30)))
field() { python3 -c "import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$server" "$1"; }
endpoint=$(field endpoint)
AWS_ACCESS_KEY_ID=$(field accessKeyId)
AWS_SECRET_ACCESS_KEY=$(field secretAccessKey)
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
aws --endpoint-url "$endpoint" s3 mb s3://bench >/dev/null
aws --endpoint-url "$endpoint" s3 cp --recursive --quiet "$pack" s3://bench/pack

redirfs() { node dist/cli/main.js "$@"; }
redirfs mount s3://bench/pack "$mountpoint" --memory "$memory" --s3-endpoint "$endpoint" --s3-path-style >/dev/null
stats() { redirfs stats --json "$mountpoint"; }
pid=$(stats | python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])')
budget=$(stats | python3 -c 'import json, sys; print(json.load(sys.stdin)["memory"]["budgetBytes"])')

# The daemon's own view each second: the largest of each figure over the run.
(
  while kill -0 "$pid" 2>/dev/null; do { stats 2>/dev/null | tr -d '\n'; echo; } || true; sleep 1; done
) | python3 -c '
import json, sys
peak = {}
for line in sys.stdin:
    try: m = json.loads(line)["memory"]
    except ValueError: continue
    for key in ("sampleBufferBytes", "jsHeapBytes", "externalBytes"): peak[key] = max(peak.get(key, 0), m[key])
    peak["externalOutsideSamples"] = max(peak.get("externalOutsideSamples", 0), m["externalBytes"] - m["sampleBufferBytes"])
print(json.dumps(peak))' > "$work/peaks.json" &
sampler=$!

samples=$(stats | python3 -c 'import json, sys; print(json.load(sys.stdin)["layout"]["samples"])')
start=$(date +%s.%N)
for epoch in $(seq 1 "$epochs"); do
  find "$mountpoint" -type f | shuf --random-source=<(yes "$epoch") | xargs -d '\n' -P 8 -n 32 cat > /dev/null
done
seconds=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
hwm=$(awk '/VmHWM/ { print $2 * 1024 }' "/proc/$pid/status")
fusermount3 -u "$mountpoint"
wait "$sampler" || true

python3 - "$budget" "$hwm" "$samples" "$epochs" "$seconds" "$work/peaks.json" "$(git rev-parse --short HEAD)" <<'EOF'
import json, sys
budget, hwm, samples, epochs = (int(x) for x in sys.argv[1:5])
seconds, peaks, commit = float(sys.argv[5]), json.load(open(sys.argv[6])), sys.argv[7]
mib = lambda b: f"{b / 2**20:.1f} MiB"
print(f"commit {commit}: {samples} samples, {epochs} epochs in {seconds} s, --memory {mib(budget)}")
print(f"daemon peak RSS (VmHWM) {mib(hwm)}: {mib(hwm - budget)} above --memory")
print("largest in the daemon's stats, sampled each second: " + ", ".join(f"{k} {mib(v)}" for k, v in peaks.items()))
EOF
