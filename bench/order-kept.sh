#!/usr/bin/env bash
# How much of one epoch's order the next keeps, on the convergence bench's
# shapes (bench/convergence.py): digits-x8's (12,123 files in 10 classes)
# and templates-1000's (12,000 in 1,000 classes), K = 64, 2 readers as its
# 2 DataLoader workers, batch 32, 6 epochs, reads of one file (a directory)
# and of 16 (a pack). "order kept" is the correlation of each file's place
# in an epoch with its place in the epoch before: a fresh shuffle has 0.
# Writes bench/results/order-kept.md (a minute or two here).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/bench/results/order-kept.md}
commit=$(git -C "$root" rev-parse --short HEAD)
shapes=(
  "digits-x8|12123|10"
  "templates-1000|12000|1000"
)
{
  echo "# Order kept from one epoch to the next"
  echo
  echo "Made by \`bash bench/order-kept.sh\` on commit $commit: \`redirfs simulate\` on the shapes of the convergence"
  echo "bench's datasets. The last column is the correlation of each file's place in an epoch with its place in the"
  echo "epoch before, averaged over the run's pairs of epochs: 0 for a fresh shuffle every epoch, as PyTorch's."
  for shape in "${shapes[@]}"; do
    IFS='|' read -r name files classes <<<"$shape"
    for block in 1 16; do
      echo
      echo "### $name: $files files in $classes classes, block $block"
      echo
      # shellcheck disable=SC2054  # strict,pool,mix is one argument
      command=(simulate --files "$files" --classes "$classes" --mean-size 1000 --chunk-sizes 64 --memory 0.1,0.25 --mix-block "$block" --readers 2 --batch-size 32 --epochs 6 --modes strict,pool,mix)
      echo "\`redirfs ${command[*]}\`"
      echo
      "$root/bin/redirfs" "${command[@]}"
    done
  done
} >"$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out"
