#!/usr/bin/env bash
# Writes docs/configuration.md (or <out>) from the CLI's own --help, so the
# option reference cannot drift from the code: test/docs/configuration.test.ts
# fails when the committed page is not what this writes. Run after changing
# an option: bash scripts/configuration-doc.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/docs/configuration.md}
cli="$root/bin/redirfs"
{
  echo "# Configuration"
  echo
  echo "Every command and option, as \`redirfs <command> --help\` prints it (this page is written from that"
  echo "output by \`scripts/configuration-doc.sh\`; a test fails when it is stale). What the options mean in"
  echo "practice: [semantics.md](semantics.md) (modes, groups, runs), [packs.md](packs.md),"
  echo "[object-storage.md](object-storage.md), [cluster.md](cluster.md), [metrics.md](metrics.md)."
  echo
  echo "Environment: \`REDIRFS_FUSE_BACKEND\` and \`REDIRFS_FUSE_THREADS\` (the mount options of those names),"
  echo "\`REDIRFS_RUNTIME_DIR\` (where records and default logs go), \`REDIRFS_RUN_ID\` (in a trainer's"
  echo "environment: names its run), the standard AWS variables for buckets (\`AWS_PROFILE\`,"
  echo "\`AWS_ACCESS_KEY_ID\`, \`AWS_REGION\`, \`AWS_ENDPOINT_URL\`, ...)."
  for command in "" mount umount stats reset pack verify simulate; do
    echo
    if [ -z "$command" ]; then echo "## redirfs"; else echo "## redirfs $command"; fi
    echo
    echo '```'
    # shellcheck disable=SC2086
    COLUMNS=100 "$cli" $command --help
    echo '```'
  done
} > "$out"
