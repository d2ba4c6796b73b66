#!/usr/bin/env bash
# The real mount of issue-sized many-class data: test/daemon/shared-layout.test.ts
# (CI runs it at 2,000 classes of 4 files) at 20,000 classes of 10 files
# (200,000 small files) at 5% memory, over the directory and over a pack in
# the shared layout: 3 epochs of 8 readers each, every one exact with the
# right labels, within --memory. Keeps the test's TAP: its assertions and what
# each mount counted (opens that waited, redirects, reads, seconds per epoch).
# Writes bench/results/many-classes-mount.md (15-30 minutes here).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/bench/results/many-classes-mount.md}
classes=${CLASSES:-20000}
files=${FILES_PER_CLASS:-10}
commit=$(git -C "$root" rev-parse --short HEAD)
cd "$root"
log=$(mktemp /tmp/redirfs-many-classes-mount-XXXXXX.tap)
trap 'rm -f "$log"' EXIT
status=0
REDIRFS_TEST_CLASSES=$classes REDIRFS_TEST_FILES_PER_CLASS=$files \
  npx tap --reporter=tap --timeout=3600 test/daemon/shared-layout.test.ts >"$log" 2>&1 || status=$?
{
  echo "# Many classes, mounted: $classes classes of $files files at 5% memory"
  echo
  echo "Made by \`bash bench/many-classes-mount.sh\` on commit $commit: test/daemon/shared-layout.test.ts at"
  echo "$classes classes of $files files (200-1,000 bytes each), over the directory and over a pack in the shared layout."
  echo "Exit status $status. The test's assertions and comments:"
  echo
  echo '```'
  grep -E '^ *(ok|not ok|# [^S{]|# \{)' "$log" | grep -v '^ *# Subtest' | sed 's/^ *//' || tail -40 "$log"
  echo '```'
} >"$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out (exit status $status)"
exit "$status"
