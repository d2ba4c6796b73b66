#!/usr/bin/env bash
# The least memory the class layout accepts (src/redirect/budget.ts) on the
# shapes bench/many-classes.sh simulates: 200,000 files, each dataset's files
# per class, K = 64. Only the refusal is computed, so it takes seconds.
# Writes bench/results/class-layout-minimum.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/bench/results/class-layout-minimum.md}
commit=$(git -C "$root" rev-parse --short HEAD)
files=200000
shapes=("ImageNet-1k|156" "ImageNet-21k|290" "iNaturalist 2021|740" "Glint360K|4255" "10 files per class|20000")
{
  echo "# The least memory of the class layout"
  echo
  echo "Made by \`bash bench/class-layout-minimum.sh\` on commit $commit: \`redirfs simulate --layouts class\` at 1% memory,"
  echo "where every shape is refused with what it needs; $files synthetic files in uneven classes, K = 64, as"
  echo "\`bench/results/simulate-many-classes.md\`. A class smaller than a chunk is charged its own files."
  echo
  echo "| shape | classes | files per class | the class layout needs |"
  echo "|---|---|---|---|"
  for shape in "${shapes[@]}"; do
    IFS='|' read -r name classes <<<"$shape"
    needs=$("$root/bin/redirfs" simulate --files "$files" --classes "$classes" --chunk-sizes 64 --memory 0.01 --layouts class --modes pool --epochs 1 |
      grep -o 'at least [0-9.]*% of the dataset' | grep -o '[0-9.]*%')
    echo "| $name | $classes | $((files / classes)) | $needs |"
  done
} > "$out"
cat "$out"
