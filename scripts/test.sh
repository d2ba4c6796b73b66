#!/usr/bin/env bash
# The test runs:
#   npm test                   scripts/setup.sh, the whole suite, then the FUSE tests again on the fuse-native backend
#   npm run test:unit          the tests that mount nothing and start no server (seconds)
#   npm run test:fuse-native   only the FUSE tests on the fuse-native backend
# Where the output is not a terminal (CI, a log), each run's TAP is kept and
# its failures are listed again at its end: CI shows only a run's last lines,
# where tap's count says how many failed but not which.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
[ "$what" != all ] || bash scripts/setup.sh
unit=(test/redirect test/engine test/util test/chunks test/fs/bind.test.ts test/fs/errno.test.ts test/fs/handles.test.ts
  test/runs/run-tracker.test.ts test/cluster/wire.test.ts test/cluster/data-channel.test.ts test/s3/key-order.test.ts
  test/s3/location.test.ts test/s3/listing-xml.test.ts test/s3/etags.test.ts test/pack/format.test.ts)
fuse_native=(test/cli/mount.test.ts test/fs/adapter.test.ts test/fs/redirection.test.ts test/fidelity/pytorch.test.ts
  test/fidelity/train-val.test.ts test/pack/pack.test.ts)
suite() { # LABEL TAP-ARGS...
  local label=$1; shift
  if [ -t 1 ]; then npx tap "$@"; return; fi
  local log; log=$(mktemp "/tmp/redirfs-$label-XXXXXX.tap")
  local status=0
  npx tap --reporter=tap "$@" | tee "$log" || status=$?
  [ "$status" = 0 ] || node scripts/tap-failures.mjs "$log" || true
  rm -f "$log"
  return "$status"
}
case $what in
  all) suite suite && REDIRFS_FUSE_BACKEND=fuse-native suite fuse-native "${fuse_native[@]}" ;;
  unit) suite unit --jobs=2 "${unit[@]}" ;;
  fuse-native) REDIRFS_FUSE_BACKEND=fuse-native suite fuse-native "${fuse_native[@]}" ;;
  *) echo "usage: scripts/test.sh [all|unit|fuse-native]" >&2; exit 2 ;;
esac
