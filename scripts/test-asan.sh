#!/usr/bin/env bash
# npm run test:asan: the tests of the native code (the chunk reader, the
# FUSE server, packs read through both, the disk cache) with the addons
# built for AddressSanitizer and UndefinedBehaviorSanitizer (build-asan.sh),
# clang's ASan runtime preloaded into node and every process the tests
# start (the CLI, the daemons), and REDIRFS_NATIVE_BUILD choosing that
# build. Passes when the tests pass and no process wrote a report; each
# report is printed. As root (the tests mount), after npm run setup.
# Arguments replace the test files (tap options may come with them).
#   ASAN_OPTIONS   detect_leaks=0: Node keeps memory to its exit on purpose
#                  (leak reports would be Node's, not ours); every report
#                  to a file per process, so a daemon's is not lost in its log
#   UBSAN_OPTIONS  halt_on_error: undefined behaviour stops the process,
#                  as a memory error does
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build-asan.sh
runtime=$(clang++ -print-file-name=libclang_rt.asan-x86_64.so)
[ -f "$runtime" ] || { echo "test:asan: clang's ASan runtime is not installed ($runtime); install Debian's clang (npm run setup does)" >&2; exit 1; }
reports=$(mktemp -d "${TMPDIR:-/tmp}/redirfs-asan-XXXXXX")
trap 'rm -rf "$reports"' EXIT

# Arguments, when given, replace the files (and may add tap's options): npm run test:asan -- --grep 'crafted' test/pack/pack.test.ts
tests=(test/chunks/native.test.ts test/fs/native-server.test.ts test/pack/pack.test.ts test/pack/chunk-cache.test.ts)
[ $# -eq 0 ] || tests=("$@")
status=0
REDIRFS_NATIVE_BUILD=build-asan \
  LD_PRELOAD="$runtime" \
  ASAN_OPTIONS="detect_leaks=0:log_path=$reports/report" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
  npx tap --jobs=2 "${tests[@]}" || status=$?

found=$(find "$reports" -type f | wc -l)
if [ "$found" -gt 0 ]; then
  for report in "$reports"/*; do echo "== $report" >&2; cat "$report" >&2; done
  echo "test:asan: $found process(es) wrote a sanitizer report (above)" >&2
  exit 1
fi
[ "$status" = 0 ] || { echo "test:asan: the tests failed under the sanitizers (no report was written)" >&2; exit "$status"; }
echo "test:asan: passed (${tests[*]}), no sanitizer report"
