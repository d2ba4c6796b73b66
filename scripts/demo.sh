#!/usr/bin/env bash
# The demo: generate a small ImageFolder of PNGs, mount it with redirfs at a
# quarter of its size in memory in the default mode, train-read it with unmodified PyTorch
# (ImageFolder + DataLoader, 2 workers, 3 epochs), check every label, show
# the stats, unmount.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/redirfs-demo.XXXXXX)
mnt="$work/mnt"
mkdir -p "$mnt"
cleanup() { ./bin/redirfs umount --force "$mnt" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

/usr/bin/python3 scripts/demo_train.py generate "$work/data"
size=$(du -sb "$work/data" | cut -f1)
# The default, recommended mode (mix); chunks of 8 because the demo's classes are small (64 is the default).
./bin/redirfs mount "$work/data" "$mnt" --memory $((size / 4)) --chunk-size 8 ${REDIRFS_DEMO_MODE:+--redirect "$REDIRFS_DEMO_MODE"}
/usr/bin/python3 scripts/demo_train.py train "$mnt"
echo
./bin/redirfs stats "$mnt"
./bin/redirfs umount "$mnt"
echo
echo "unmounted; nothing is left in memory."
