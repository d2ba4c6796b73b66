#!/usr/bin/env bash
# npm run fuzz -- [target...] [--time S] [--seed N] [--runs N]: runs the
# fuzzers (docs/development.md, "Fuzzing"), each seeded and bounded.
#   targets  pack-index, s3, stats, include-list, cli (TypeScript, fuzz/*.fuzz.ts);
#            crc32, chunk-pieces, fuse-tree (libFuzzer, native/fuzz/*_fuzzer.cc); default: all
#   --time S   seconds per target (default: each target's CI budget: a fixed set of cases,
#              seeds 1 to N, with a time cap; a few minutes in all)
#   --seed N   the first case's seed (default 1); a failure prints the seed that reproduces it
#   --runs N   cases per target at most (--seed N --runs 1 runs one case again)
# The TypeScript fuzzers run under tap (as root for the pack index's CLI runs,
# after npm run setup); the native ones are built by clang with libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer into native/build-fuzz/,
# where a crashing input is kept and named.
set -euo pipefail
cd "$(dirname "$0")/.."

ts_targets=(pack-index s3 stats include-list cli)
native_targets=(crc32 chunk-pieces fuse-tree)
targets=()
time_given='' seed=1 runs=''
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time_given=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz: unknown option $1 (see npm run fuzz -- --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
for number in "$seed" "${time_given:-0}" "${runs:-0}"; do
  [[ "$number" =~ ^[0-9]+$ ]] || { echo "fuzz: --time, --seed and --runs take whole numbers, got '$number'" >&2; exit 2; }
done
[ ${#targets[@]} -gt 0 ] || targets=("${ts_targets[@]}" "${native_targets[@]}")

# The CLI and the pack index's CLI runs use the built CLI: build it when a source is newer.
if [ ! -f dist/cli/main.js ] || [ -n "$(find src -newer dist/cli/main.js -name '*.ts' -print -quit)" ]; then npx tsc -p tsconfig.json; fi

failed=()
for target in "${targets[@]}"; do
  if [[ " ${ts_targets[*]} " == *" $target "* ]]; then
    echo "fuzz: $target (seed $seed${time_given:+, ${time_given} s}${runs:+, at most $runs cases})"
    FUZZ_SEED=$seed FUZZ_TIME=$time_given FUZZ_RUNS=$runs npx tap --disable-coverage --timeout=$(( ${time_given:-120} + 600 )) "fuzz/$target.fuzz.ts" || failed+=("$target")
  elif [[ " ${native_targets[*]} " == *" $target "* ]]; then
    name=${target//-/_}_fuzzer
    build=native/build-fuzz
    mkdir -p "$build/crashes"
    if [ ! -x "$build/$name" ] || [ -n "$(find native -maxdepth 2 \( -name '*.h' -o -name "$name.cc" \) -newer "$build/$name" -print -quit)" ]; then
      command -v clang++ >/dev/null || { echo "fuzz: clang++ is not installed; install Debian's clang (npm run setup does, as root)" >&2; exit 1; }
      # shellcheck disable=SC2046
      clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer $(pkg-config --cflags fuse3) \
        "native/fuzz/$name.cc" -o "$build/$name" -lz
    fi
    # The native targets' CI budget: a fixed number of inputs (libFuzzer's from -seed are the same each
    # run), a few seconds each, capped at 20 s. A crash's input is written to $build/crashes/.
    if [ -z "$time_given" ] && [ -z "$runs" ]; then
      case "$target" in fuse-tree) budget=(-runs=60000 -max_total_time=20) ;; *) budget=(-runs=250000 -max_total_time=20) ;; esac
    else
      budget=(-max_total_time="${time_given:-20}" ${runs:+-runs="$runs"})
    fi
    echo "fuzz: $target (libFuzzer, seed $seed, ${budget[*]})"
    if ! "$build/$name" -seed="$seed" "${budget[@]}" -artifact_prefix="$build/crashes/$target-" -print_final_stats=1 2>"$build/$target.log"; then
      tail -n 40 "$build/$target.log" >&2
      echo "fuzz: $target failed; reproduce with the input libFuzzer wrote: $build/$name $build/crashes/$target-<crash file> (its log: $build/$target.log)" >&2
      failed+=("$target")
    else
      grep -E '^(stat::number_of_executed_units|Done)' "$build/$target.log" | tr '\n' ' '; echo
    fi
  else
    echo "fuzz: no target '$target' (targets: ${ts_targets[*]} ${native_targets[*]})" >&2; exit 2
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: failed: ${failed[*]}" >&2; exit 1; }
echo "fuzz: ${targets[*]}: no failure"
