#!/usr/bin/env bash
# Hot path over the 750M directory (strict, everything in memory): files/s and the daemon's CPU per file; PERF=seconds records perf, CPUPROF=dir a JS profile. REPO=checkout to measure.
set -euo pipefail
cd "${REPO:?the checkout to measure}"
D=${DATA:-$PWD/bench/data/jpeg-750M-16c-s0}
M=/tmp/hot-mnt; mkdir -p $M
(cd $D && find . -name "*.jpg" | sed "s|^./||" | sort) > /tmp/hot-all.txt; head -5000 /tmp/hot-all.txt > /tmp/hot-list.txt
node ${CPUPROF:+--cpu-prof --cpu-prof-dir=$CPUPROF} dist/cli/main.js mount $D $M --memory 2G --include /tmp/hot-list.txt --redirect ${MODE:-strict} --log-level warn > /dev/null
pid=$(python3 -c "import json;print(json.load(open('$M/.redirfs/stats'))['pid'])")
cat > /tmp/hot-read.py <<'PY'
import sys, time, concurrent.futures
paths=[sys.argv[1]+'/'+l.strip() for l in open('/tmp/hot-list.txt')]
def one(p):
    with open(p,'rb') as f: return len(f.read())
for r in range(int(sys.argv[2])):
    t=time.time()
    with concurrent.futures.ThreadPoolExecutor(8) as pool: sum(pool.map(one, paths, chunksize=64))
    print(f"{len(paths)/(time.time()-t):.0f} files/s", flush=True)
PY
/usr/bin/python3 /tmp/hot-read.py $M 1
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
if [ -n "${PERF:-}" ]; then perf record -F 2000 -g -p $pid -o /tmp/hot.perf -- sleep ${PERF} > /dev/null 2>&1 & pp=$!; fi
/usr/bin/python3 /tmp/hot-read.py $M ${ROUNDS:-4}
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
echo "daemon CPU µs/file: $(( (t1 - t0) * 10000 / (5000 * ${ROUNDS:-4}) ))"
for t in /proc/$pid/task/*; do echo "$(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done | awk '{a[$1]+=$2} END {for (k in a) print k, a[k]}' | sort -k2 -n -r | head
[ -n "${PERF:-}" ] && wait $pp || true
node dist/cli/main.js umount $M
