"""An ImageNet-shaped tree through a real mount: how long mounting takes,
how long torchvision's ImageFolder takes to index the mount versus the raw
directory, and what the daemon holds in memory per file.

Generates (once, kept under --data) a tree of --files tiny sample files in
--classes class directories with ImageNet-like names; the bytes do not
matter here, only the entries. Then, in one run:
  1. ImageFolder(<raw>) in a fresh Python process (after one warm-up run);
  2. `redirfs mount` (scan + layout), timed, and the daemon's RSS after it;
  3. ImageFolder(<mnt>) twice: the first pays the kernel's lookups, the
     second is served from the kernel's caches;
  4. with --epochs N, every file read once per epoch through the mount by
     8 threads, and the daemon's RSS and peak RSS after each epoch (flat,
     or the daemon leaks).

With --bucket the same tree is put (by --put-threads parallel clients) into
a single-node Ceph RGW (scripts/rgw.sh) under one prefix, one object per
file, and mounted from there through the object bench's link (bench/netem.py,
--delay-ms each way, 1 Gbit/s): the mount's time is then the parallel listing
(one delimited LIST, then every class prefix at once) and building the tree;
the results also give the CPU the mount cost the daemon (its life so far) and
the server (radosgw, its OSD and monitor, meanwhile).

  /usr/bin/python3 bench/tree-scale.py [--files 500000] [--classes 1000] [--memory 300M] [--epochs N] [--bucket]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from harness import HERE, REDIRFS, code_version  # bench/harness.py, next to this file
from netem import Link
from objects import BUCKET, RgwServer, cpu_seconds, server_env
from run import read_all

TREE_FORMAT = 1  # bump when the generated tree changes, so cached trees are rebuilt
INDEX = "import sys, time\nfrom torchvision import datasets\nt = time.time()\nd = datasets.ImageFolder(sys.argv[1])\nprint(time.time() - t, len(d))"


def log(message):
    print(f"[tree-scale] {message}", file=sys.stderr, flush=True)


def generate(root, files, classes):
    marker = os.path.join(root, ".complete")
    wanted = f"{TREE_FORMAT} {files} {classes}"
    if os.path.exists(marker) and open(marker).read() == wanted:
        return
    subprocess.run(["rm", "-rf", root], check=True)
    log(f"generating {files} files in {classes} classes under {root}")
    per_class = -(-files // classes)
    written = 0
    for c in range(classes):
        wnid = f"n{1440764 + c * 7919:08d}"
        os.makedirs(os.path.join(root, wnid))
        for i in range(min(per_class, files - written)):
            with open(os.path.join(root, wnid, f"{wnid}_{10000 + i * 13}.JPEG"), "wb") as f:
                f.write(b"\xff\xd8\xff\xe0" + f"{wnid} {i}".encode().ljust(92, b" ") + b"\xff\xd9")
            written += 1
    with open(marker, "w") as f:
        f.write(wanted)


# Every file of the tree as an object under a prefix, by parallel clients: boto3 (the aws CLI's Python has it).
PUTTER = """
import os, sys, time
from concurrent.futures import ThreadPoolExecutor
import boto3
from botocore.config import Config
endpoint, bucket, prefix, root, threads = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
s3 = boto3.client("s3", endpoint_url=endpoint, config=Config(max_pool_connections=threads, s3={"addressing_style": "path"}))
s3.create_bucket(Bucket=bucket)
files = [os.path.relpath(os.path.join(d, name), root) for d, _, names in os.walk(root) for name in names if not name.startswith(".")]
def put(relative):
    with open(os.path.join(root, relative), "rb") as f:
        s3.put_object(Bucket=bucket, Key=prefix + relative, Body=f.read())
started = time.time()
with ThreadPoolExecutor(threads) as pool:
    for _ in pool.map(put, files, chunksize=256):
        pass
print(len(files), time.time() - started)
"""


def put_tree(server, root, prefix, threads):
    """The tree into the bucket, straight to the server: (objects, seconds)."""
    done = subprocess.run(["python3", "-c", PUTTER, server.endpoint, BUCKET, prefix, root, str(threads)], capture_output=True, text=True, env=server_env(server))
    if done.returncode != 0:
        sys.exit(f"tree-scale: putting the tree failed: {done.stderr[-2000:]}")
    objects, seconds = done.stdout.split()
    return int(objects), float(seconds)


def image_folder_seconds(root):
    out = subprocess.run(["/usr/bin/python3", "-c", INDEX, root], check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def memory_of(pid):
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {name: int(fields[name].split()[0]) * 1024 for name in ("VmRSS", "VmHWM")}


def read_everything(root, threads=8):
    paths = [os.path.join(d, name) for d, _, names in os.walk(root) for name in names if name.endswith(".JPEG")]
    rate, total = read_all(paths, threads)
    return len(paths), total, len(paths) / rate


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=500_000)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--memory", default="300M")
    parser.add_argument("--epochs", type=int, default=0, help="also read every file once per epoch through the mount, this many epochs")
    parser.add_argument("--data", default=os.path.join(HERE, "data"))
    parser.add_argument("--out", default="", help="where latest.json and latest.md go (default bench/results/tree-scale-<files>, or bucket-scale-<files> with --bucket)")
    parser.add_argument("--bucket", action="store_true", help="mount the tree from a bucket of Ceph RGW, one object per file, through the link")
    parser.add_argument("--delay-ms", type=float, default=10, help="--bucket: the link's delay each way (default 10, as the object bench's)")
    parser.add_argument("--put-threads", type=int, default=64, help="--bucket: parallel clients putting the objects (default 64)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("tree-scale: run as root (FUSE mounts)")

    root = os.path.join(args.data, f"tree-{args.files}-{args.classes}")
    out = args.out if args.out else os.path.join(HERE, "results", f"{'bucket' if args.bucket else 'tree'}-scale-{args.files}")
    generate(root, args.files, args.classes)
    image_folder_seconds(root)  # warm the dentry cache, as a machine that just listed the data would be
    raw_seconds, raw_samples = image_folder_seconds(root)
    log(f"ImageFolder(raw) {raw_seconds:.2f} s, {raw_samples} samples")

    server = link = None
    source, options, env, bucket = root, [], None, {}
    if args.bucket:
        for name in [name for name in os.environ if name.startswith("AWS_")]:
            del os.environ[name]  # the server's keys and region are given explicitly, nothing of the machine's
        server = RgwServer(4 * 2**30)
        prefix = f"tree-{args.files}-{args.classes}/"
        objects, put_seconds = put_tree(server, root, prefix, args.put_threads)
        log(f"put {objects} objects in {put_seconds:.0f} s ({objects / put_seconds:.0f}/s, {args.put_threads} clients)")
        link = Link("127.0.0.1", server.port, delay=args.delay_ms / 1000, rate=1e9 / 8).start()
        source, env = f"s3://{BUCKET}/{prefix}", server_env(server)
        options = ["--s3-endpoint", link.endpoint, "--s3-path-style"]
        bucket = {"server": server.version, "objects": objects, "putSeconds": put_seconds, "putThreads": args.put_threads, "delayMs": args.delay_ms}
    mountpoint = tempfile.mkdtemp(prefix="redirfs-tree-")
    started = time.time()
    try:
        before = link.stats() if link else None
        server_cpu = sum(cpu_seconds(pid) for pid in server.pids()) if server else 0
        subprocess.run([REDIRFS, "mount", source, mountpoint, "--memory", args.memory, "--log-level", "warn", *options], check=True, stdout=subprocess.DEVNULL, env=env)
        mount_seconds = time.time() - started
        if link:
            bucket["listRequests"] = link.stats()["LIST"] - before["LIST"]
            # CPU the mount cost: the daemon's whole life so far, and the S3 server's (RGW, its OSD and monitor) meanwhile.
            with open(os.path.join(mountpoint, ".redirfs", "stats")) as f:
                bucket["daemonCpuSeconds"] = cpu_seconds(json.load(f)["pid"])
            bucket["serverCpuSeconds"] = sum(cpu_seconds(pid) for pid in server.pids()) - server_cpu
        run_mounted(args, out, mountpoint, mount_seconds, raw_seconds, raw_samples, bucket)
    finally:
        if os.path.ismount(mountpoint):
            subprocess.run([REDIRFS, "umount", "--force", mountpoint], check=False, stdout=subprocess.DEVNULL)
        os.rmdir(mountpoint)
        if link:
            link.stop()
        if server:
            server.stop()


def run_mounted(args, out, mountpoint, mount_seconds, raw_seconds, raw_samples, bucket):
    """Everything measured through the mount, then the report."""
    with open(os.path.join(mountpoint, ".redirfs", "stats")) as f:
        stats = json.load(f)
    pid = stats["pid"]
    after_mount = memory_of(pid)
    # Sample bytes the protocol holds (the budget's share of RSS), so the rest is what the tree and the process cost.
    held = stats["protocol"]["residentBytes"] + stats["protocol"]["inflightBytes"]
    log(f"mount {mount_seconds:.2f} s, daemon RSS {after_mount['VmRSS'] / 2**20:.0f} MiB")
    first_seconds, mounted_samples = image_folder_seconds(mountpoint)
    second_seconds, _ = image_folder_seconds(mountpoint)
    log(f"ImageFolder(mount) {first_seconds:.2f} s, then {second_seconds:.2f} s")
    epochs = []
    for e in range(args.epochs):
        files, total, seconds = read_everything(mountpoint)
        with open(os.path.join(mountpoint, ".redirfs", "stats")) as f:
            daemon = json.load(f)["memory"]
        # What the RSS is made of, as the daemon sees it: the JS heap, and the sample buffers (lent and idle).
        epochs.append({"files": files, "bytes": total, "seconds": seconds, "memory": memory_of(pid),
                       "jsHeapBytes": daemon["jsHeapBytes"], "sampleBufferBytes": daemon["sampleBufferBytes"], "idleSampleBufferBytes": daemon["idleSampleBufferBytes"]})
        log(f"epoch {e}: {files} files in {seconds:.1f} s, daemon RSS {epochs[-1]['memory']['VmRSS'] / 2**20:.0f} MiB, peak {epochs[-1]['memory']['VmHWM'] / 2**20:.0f} MiB, "
            f"JS heap {daemon['jsHeapBytes'] / 2**20:.0f} MiB, sample buffers {daemon['sampleBufferBytes'] / 2**20:.0f} MiB")

    commit = code_version()
    command = "/usr/bin/python3 bench/tree-scale.py " + " ".join(sys.argv[1:])
    result = {"commit": commit, "command": command, "startedAt": time.strftime("%Y-%m-%dT%H:%M:%S"), "files": args.files, "classes": args.classes, "memory": args.memory,
              "samples": {"raw": raw_samples, "mount": mounted_samples}, "mountSeconds": mount_seconds,
              "imageFolderSeconds": {"raw": raw_seconds, "mountFirst": first_seconds, "mountSecond": second_seconds},
              "daemonAfterMount": after_mount, "sampleBytesHeldAfterMount": held, "epochs": epochs, **({"bucket": bucket} if bucket else {})}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "latest.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = [f"Run {result['startedAt']} on commit {commit}: `{command}` ({args.files} files in {args.classes} classes, `--memory {args.memory}`)", "",
             "| measure | value |", "|---|---|",
             (f"| `redirfs mount` (parallel listing through the link + layout) | {mount_seconds:.1f} s ({bucket['listRequests']} LIST requests) |" if bucket
              else f"| `redirfs mount` (scan + layout) | {mount_seconds:.1f} s |"),
             f"| `ImageFolder(<raw>)` | {raw_seconds:.2f} s |",
             f"| `ImageFolder(<mnt>)`, first | {first_seconds:.2f} s ({first_seconds / raw_seconds:.1f}x raw) |",
             f"| `ImageFolder(<mnt>)`, again | {second_seconds:.2f} s ({second_seconds / raw_seconds:.1f}x raw) |",
             f"| daemon RSS after mount | {after_mount['VmRSS'] / 2**20:.0f} MiB ({after_mount['VmRSS'] / args.files:.0f} B per file) |",
             f"| of which sample bytes held | {held / 2**20:.0f} MiB |",
             f"| RSS less sample bytes held | {(after_mount['VmRSS'] - held) / 2**20:.0f} MiB ({(after_mount['VmRSS'] - held) / args.files:.0f} B per file, the fixed cost included) |"]
    if bucket:
        lines.insert(4, f"| the tree put into {bucket['server']} | {bucket['objects']} objects by {bucket['putThreads']} parallel clients in {bucket['putSeconds']:.0f} s "
                        f"({bucket['objects'] / bucket['putSeconds']:.0f}/s); the mount reads it through bench/netem.py, {bucket['delayMs']:.0f} ms each way, 1 Gbit/s |")
        lines.insert(6, f"| CPU of the mount | the daemon {bucket['daemonCpuSeconds']:.1f} s (from its start), the S3 server {bucket['serverCpuSeconds']:.1f} s |")
    if epochs:
        rss = [e["memory"]["VmRSS"] / 2**20 for e in epochs]
        lines += [f"| an epoch, 8 threads | {epochs[0]['files']} files in {statistics.median(e['seconds'] for e in epochs):.0f} s (median of {len(epochs)}) |",
                  f"| daemon RSS after epochs 1, {len(epochs) // 2 + 1}, {len(epochs)} | {rss[0]:.0f}, {rss[len(epochs) // 2]:.0f}, {rss[-1]:.0f} MiB |",
                  f"| daemon peak RSS | {epochs[-1]['memory']['VmHWM'] / 2**20:.0f} MiB |"]
        picked = [epochs[0], epochs[len(epochs) // 2], epochs[-1]]
        heap = ", ".join(f"{e['jsHeapBytes'] / 2**20:.0f}" for e in picked)
        buffers = ", ".join(f"{e['sampleBufferBytes'] / 2**20:.1f}" for e in picked)
        lines += [f"| of which JS heap in use, after the same epochs | {heap} MiB |",
                  f"| sample buffers (lent and idle), after the same epochs | {buffers} MiB |"]
    with open(os.path.join(out, "latest.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
