#!/usr/bin/env bash
# The class layout beside the shared one (docs/design.md, "Shared chunks")
# on the shapes of datasets with many classes, scaled down to 200,000 files
# with each one's files per class: ImageNet-1k (1,280 per class), ImageNet-21k
# (690), iNaturalist 2021 (270), Glint360K (47) and a tree of 10 per class.
# Memory as the fractions users have; reads as a pack's (blocks of 16 files
# of K = 64) and a directory's (one file each); 8 and 32 readers.
# Writes bench/results/simulate-many-classes.md (about 15 minutes here).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/bench/results/simulate-many-classes.md}
commit=$(git -C "$root" rev-parse --short HEAD)
files=200000
shapes=(
  "ImageNet-1k|156|0.1,0.25"
  "ImageNet-21k|290|0.03,0.05"
  "iNaturalist 2021|740|0.05,0.1"
  "Glint360K|4255|0.02,0.03,0.05,0.1,0.2"
  "10 files per class|20000|0.05,0.1,0.25"
)
{
  echo "# Many classes: the class layout beside the shared one"
  echo
  echo "Made by \`bash bench/many-classes.sh\` on commit $commit: \`redirfs simulate\`, $files synthetic files of ~110 KB"
  echo "in uneven classes, K = 64, 3 epochs, batch 256. \"block\" is what one read brings: 16 files over a pack,"
  echo "1 over a directory. A class row refused names the memory the class layout needs."
  for shape in "${shapes[@]}"; do
    IFS='|' read -r name classes memory <<<"$shape"
    for block in 16 1; do
      for readers in 8 32; do
        echo
        echo "### $name: $classes classes ($((files / classes)) files each), block $block, $readers readers"
        echo
        # shellcheck disable=SC2054  # pool,mix is one argument
        command=(simulate --files "$files" --classes "$classes" --chunk-sizes 64 --memory "$memory" --mix-block "$block" --readers "$readers" --modes pool,mix --epochs 3)
        echo "\`redirfs ${command[*]}\`"
        echo
        "$root/bin/redirfs" "${command[@]}"
      done
    done
  done
} >"$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out"
