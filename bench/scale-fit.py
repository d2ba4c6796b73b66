"""What grows with the files and what does not: a line through two runs of bench/tree-scale.py of one kind.

Reads the committed results of a small and a large run (a bucket's, and a local tree's) and writes, per file
between the two, the mount's time, the CPU it cost (a bucket's: the daemon's and the S3 server's) and the
daemon's RSS after mount, the fixed part those lines leave at no files, and what they give for ImageNet's
1.28M files. Nothing is run; the figures are only as good as two points are.

  python3 bench/scale-fit.py [--out bench/results/scale-fit]
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import code_version  # noqa: E402

PAIRS = [("a bucket (Ceph RGW, through the object bench's link)", "bucket-scale-20000", "bucket-scale-100000"),
         ("a local tree", "tree-scale-50000", "tree-scale-500000")]
IMAGENET = 1_281_167


def figures(run):
    bucket = run.get("bucket") or {}
    out = {"files": run["files"], "mount seconds": run["mountSeconds"], "daemon RSS after mount (bytes)": run["daemonAfterMount"]["VmRSS"]}
    if bucket:
        out["daemon CPU seconds"] = bucket["daemonCpuSeconds"]
        out["S3 server CPU seconds"] = bucket["serverCpuSeconds"]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "results", "scale-fit"))
    args = parser.parse_args()
    lines = [f"Run on commit {code_version()}: `python3 bench/scale-fit.py`", "",
             "Lines through two committed runs of bench/tree-scale.py each (their commits as they say). Per file: the slope between the "
             "two; fixed: where the line meets no files; at ImageNet's size: the line at 1,281,167 files.", ""]
    result = {}
    for what, small_dir, large_dir in PAIRS:
        runs = []
        for name in (small_dir, large_dir):
            with open(os.path.join(HERE, "results", name, "latest.json")) as f:
                runs.append(json.load(f))
        small, large = figures(runs[0]), figures(runs[1])
        lines += [f"### {what}: {small['files']} files (`bench/results/{small_dir}`, {runs[0]['commit']}) and {large['files']} "
                  f"(`bench/results/{large_dir}`, {runs[1]['commit']})", "",
                  "| measure | small | large | per file | fixed | at ImageNet's size |", "|---|---|---|---|---|---|"]
        rows = {}
        for key in small:
            if key == "files":
                continue
            slope = (large[key] - small[key]) / (large["files"] - small["files"])
            fixed = small[key] - slope * small["files"]
            rows[key] = {"small": small[key], "large": large[key], "perFile": slope, "fixed": fixed, "imagenet": fixed + slope * IMAGENET}
            if key.endswith("(bytes)"):
                fmt = lambda v: f"{v / 2**20:.0f} MiB"  # noqa: E731
                per = f"{slope:.0f} B"
            else:
                fmt = lambda v: f"{v:.1f} s"  # noqa: E731
                per = f"{slope * 1e6:.0f} µs"
            lines.append(f"| {key.replace(' (bytes)', '')} | {fmt(small[key])} | {fmt(large[key])} | {per} | {fmt(fixed)} | {fmt(fixed + slope * IMAGENET)} |")
        lines.append("")
        result[what] = rows
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "latest.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "latest.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
