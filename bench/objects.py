"""The object-storage benchmark: training reads from a bucket, side by side, in one run.

An S3 server (moto, a real S3-compatible server) holds the bench dataset twice: as plain objects
(one per JPEG, an ImageFolder) and as a redirfs pack. Every loader reaches it through the same
link, a proxy of this bench's own (bench/netem.py) that adds a delay each way and caps the
bandwidth, as the network to a cloud bucket does. The loaders, each a PyTorch ImageFolder +
DataLoader job reading every sample once per epoch (the read pipeline):

  s3fs              Debian's s3fs-fuse over the plain objects
  rclone            Debian's rclone mount over the plain objects
  redirfs-objects   redirfs over the plain objects (default mode)
  redirfs-pack      redirfs over the pack (default mode)
  redirfs-cache     redirfs over the pack with --cache-dir on local disk (epochs 2 and later read it)
  link              no loader: every pack segment fetched with plain GETs, 16 at a time, through the same
                    link, as often as the loaders read an epoch; what the link and the server deliver
                    with nothing else on the machine, the practical bound of this setup

Each runs cold (fresh mount, page cache dropped) in a memory cgroup around the trainer and the
FUSE daemon that holds --memory plus an allowance, so no kernel cache holds the dataset. The
report gives samples/s (median of epochs 2..E), seconds per epoch, GET and LIST requests and bytes
per epoch as the link saw them, what the requests cost per epoch at S3 Standard prices, the
bound the bandwidth cap sets, and how many of the machine's cores the S3 server and the link's
proxy kept busy during each loader's run (both are Python here, and share the cores with the
trainer and the FUSE daemon).

Run: npm run bench -- --profile s3   (or /usr/bin/python3 bench/objects.py --help)
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import limits as cgroup_limits  # noqa: E402
from netem import Link  # noqa: E402
from harness import (CGROUP, DAEMON_ALLOWANCE, REDIRFS, Infeasible, Mount, code_version, drop_caches,  # noqa: E402
                 ensure_dataset, log, run_trainer, size_arg)

LOADERS = ["s3fs", "rclone", "redirfs-objects", "redirfs-pack", "redirfs-cache", "link"]
BUCKET = "bench"
KEYS = {"AWS_ACCESS_KEY_ID": "redirfs-bench", "AWS_SECRET_ACCESS_KEY": "redirfs-bench-secret", "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"}
# S3 Standard request prices (us-east-1): GET and HEAD $0.0004 per 1,000; LIST and PUT $0.005 per 1,000.
PRICE_GET = 0.0004 / 1000
PRICE_LIST = 0.005 / 1000
# What each third-party mount is given, as its documentation advises for reading many files.
S3FS_OPTIONS = "ro,use_path_request_style,enable_noobj_cache,max_stat_cache_size=100000,stat_cache_expire=3600,multireq_max=64,parallel_count=16"
RCLONE_OPTIONS = ["--read-only", "--vfs-cache-mode", "off", "--no-modtime", "--dir-cache-time", "1h", "--attr-timeout", "1h", "--transfers", "16"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto():
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    moto = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(port)], env={**env, **KEYS}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return moto, port
        except OSError:
            time.sleep(0.05)
    moto.kill()
    sys.exit("bench: moto_server did not start (the set-up installs moto[server] with pip)")


def upload(root, endpoint, prefix):
    """The dataset as plain objects, straight to the server (not through the link), by the aws CLI."""
    env = {**os.environ, **KEYS}
    subprocess.run(["aws", "s3api", "create-bucket", "--bucket", BUCKET, "--endpoint-url", endpoint], check=True, stdout=subprocess.DEVNULL, env=env)
    subprocess.run(["aws", "s3", "cp", "--recursive", "--quiet", "--exclude", ".*", "--endpoint-url", endpoint, root, f"s3://{BUCKET}/{prefix}"],
                   check=True, env=env)


class Sampler:
    """The link's counters every quarter second, so a run's requests can be cut into its epochs."""

    def __init__(self, link):
        self.link = link
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.samples.append((time.time(), self.link.stats()))
            self._stop.wait(0.25)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.samples.append((time.time(), self.link.stats()))

    def between(self, start, end):
        """The link's counters from `start` to `end` (wall clock)."""
        def at(t):
            before = [s for when, s in self.samples if when <= t]
            return before[-1] if before else self.samples[0][1]
        a, b = at(start), at(end)
        return {key: b[key] - a[key] for key in b}


class ThirdPartyMount:
    """s3fs or rclone over the plain objects, its daemon put in the cgroup."""

    def __init__(self, kind, link, limits):
        self.kind = kind
        self.mountpoint = tempfile.mkdtemp(prefix=f"redirfs-bench-{kind}-")
        if kind == "s3fs":
            self.passwd = tempfile.NamedTemporaryFile("w", delete=False, prefix="redirfs-bench-s3fs-")
            self.passwd.write(f"{KEYS['AWS_ACCESS_KEY_ID']}:{KEYS['AWS_SECRET_ACCESS_KEY']}\n")
            self.passwd.close()
            os.chmod(self.passwd.name, 0o600)
            command = ["s3fs", f"{BUCKET}:/objects", self.mountpoint, "-o", f"{S3FS_OPTIONS},url={link.endpoint},passwd_file={self.passwd.name}"]
        else:
            command = ["rclone", "mount", f":s3:{BUCKET}/objects", self.mountpoint, "--s3-provider", "Other", "--s3-endpoint", link.endpoint,
                       "--s3-access-key-id", KEYS["AWS_ACCESS_KEY_ID"], "--s3-secret-access-key", KEYS["AWS_SECRET_ACCESS_KEY"],
                       "--s3-force-path-style", "--daemon", *RCLONE_OPTIONS]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if os.path.ismount(self.mountpoint) and os.listdir(self.mountpoint):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"{kind} did not mount")
        pids = subprocess.run(["pgrep", "-f", self.mountpoint], capture_output=True, text=True).stdout.split()
        for pid in pids:
            limits.add(int(pid))

    def close(self):
        subprocess.run(["umount", "-l", self.mountpoint], check=False)
        subprocess.run(["pkill", "-f", self.mountpoint], check=False)
        time.sleep(0.5)
        shutil.rmtree(self.mountpoint, ignore_errors=True)
        if self.kind == "s3fs":
            os.remove(self.passwd.name)


def cpu_seconds(pid):
    """User and system CPU seconds a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# Plain signed GETs of every pack segment, 16 at a time, once per epoch: boto3 (the aws CLI's Python has it).
LINK_READER = """
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
import boto3
from botocore.config import Config
endpoint, bucket, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
s3 = boto3.client("s3", endpoint_url=endpoint, config=Config(max_pool_connections=16, s3={"addressing_style": "path"}))
keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="pack/segments/") for o in page.get("Contents", [])]
out = []
with ThreadPoolExecutor(16) as pool:
    for _ in range(epochs):
        started = time.time()
        sum(pool.map(lambda key: len(s3.get_object(Bucket=bucket, Key=key)["Body"].read()), keys))
        out.append([started, time.time()])
print(json.dumps(out))
"""


def read_link(link, args, info):
    """The `link` row: the pack's segments by plain GETs through the link, 16 at a time, once per epoch; no FUSE, no trainer."""
    done = subprocess.run(["python3", "-c", LINK_READER, link.endpoint, BUCKET, str(args.epochs)], capture_output=True, text=True,
                          env={**os.environ, **KEYS})
    if done.returncode != 0:
        raise RuntimeError(f"the link reader failed: {done.stderr[-2000:]}")
    return [{"started": a, "ended": b, "seconds": b - a, "samples": info["files"]} for a, b in json.loads(done.stdout)]


def measure(name, args, info, link, limits, memory, cache_dir, server_pid):
    drop_caches()
    mount = None
    extra = {}
    if name == "link":
        cpu = (cpu_seconds(server_pid), cpu_seconds(os.getpid()))
        with Sampler(link) as sampler:
            started = time.time()
            epochs = read_link(link, args, info)
            ended = time.time()
        return row_of(name, epochs, sampler, started, ended, cpu, server_pid, extra)
    try:
        s3 = ("--s3-endpoint", link.endpoint, "--s3-path-style")
        if name in ("s3fs", "rclone"):
            mount = ThirdPartyMount(name, link, limits)
            root = mount.mountpoint
        else:
            source = f"s3://{BUCKET}/objects" if name == "redirfs-objects" else f"s3://{BUCKET}/pack"
            cache = ("--cache-dir", cache_dir) if name == "redirfs-cache" else ()
            chunk = ("--chunk-size", str(args.chunk_size)) if name == "redirfs-objects" else ()
            mount = Mount(source, "mix", memory, limits, (*s3, *cache, *chunk))
            root = mount.mountpoint
        cpu = (cpu_seconds(server_pid), cpu_seconds(os.getpid()))
        with Sampler(link) as sampler:
            started = time.time()
            epochs, _ = run_trainer(limits, root, "imagefolder", "read", args, info)
            ended = time.time()
        if isinstance(mount, Mount):
            stats = mount.stats()
            extra["redirfsSource"] = stats["source"]
            extra["openWaitFraction"] = stats["protocol"]["waitedOpens"] / max(1, stats["protocol"]["opens"])
            extra["daemonPeakRssBytes"] = mount.peak_rss()
    finally:
        if mount is not None:
            mount.close()
    return row_of(name, epochs, sampler, started, ended, cpu, server_pid, extra)


def row_of(name, epochs, sampler, started, ended, cpu, server_pid, extra):
    """A loader's row: rates over epochs 2.., the link's counters per epoch, and the cores the server and the proxy kept busy."""
    wall = max(1e-9, ended - started)
    extra = {**extra, "serverCores": (cpu_seconds(server_pid) - cpu[0]) / wall, "proxyCores": (cpu_seconds(os.getpid()) - cpu[1]) / wall}
    per_epoch = [sampler.between(e["started"], e["ended"]) for e in epochs]
    later = epochs[1:] or epochs
    rates = [e["samples"] / e["seconds"] for e in later]
    requests = [sampler.between(e["started"], e["ended"]) for e in later]
    gets = statistics.mean(r["GET"] + r["HEAD"] for r in requests)
    lists = statistics.mean(r["LIST"] for r in requests)
    down = statistics.mean(r["bytesDown"] for r in requests)
    row = {"loader": name, "samplesPerSecond": statistics.median(rates), "secondsPerEpoch": statistics.median(e["seconds"] for e in later),
           "epochs": epochs, "linkPerEpoch": per_epoch, "getsPerEpoch": gets, "listsPerEpoch": lists, "bytesPerEpoch": down,
           "costPerEpoch": gets * PRICE_GET + lists * PRICE_LIST, "getsPerMiB": gets / max(1e-9, down / 2**20),
           "wholeRunLink": sampler.between(started, ended), **extra}
    log(f"{name:16s} {row['samplesPerSecond']:8.0f} samples/s  {row['secondsPerEpoch']:6.1f} s/epoch  {gets:8.0f} GETs  {down / 2**20:7.0f} MiB per epoch")
    return row


def write_report(result, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "latest.json"), "w") as f:
        json.dump(result, f, indent=1)
    rows = {r["loader"]: r for r in result["rows"]}
    best_third = max((rows[k]["samplesPerSecond"] for k in ("s3fs", "rclone") if k in rows), default=None)
    bound = result["boundSamplesPerSecond"]
    lines = [f"Run on commit {result['commit']}: `{result['command']}`", "",
             f"{result['files']} JPEGs, {result['bytes'] / 2**20:.0f} MiB, {result['classes']} classes; S3 server: moto {result['moto']} on loopback; "
             f"the link: {result['delayMs']:.0f} ms each way and {result['bandwidthBits'] / 1e9:.1f} Gbit/s ({result['bandwidthBits'] / 8 / 2**20:.0f} MiB/s) by bench/netem.py, "
             f"which bounds an epoch at {result['boundSeconds']:.1f} s ({bound:.0f} samples/s); {result['workers']} DataLoader workers, read pipeline, "
             f"{result['epochs']} epochs, figures over epochs 2..{result['epochs']}; redirfs --memory {result['memory'] / 2**20:.0f} MiB "
             f"({result['memoryFraction']:.0%} of the dataset), pack segments of {result['segmentSize'] / 2**20:.0f} MiB.", "",
             f"s3fs options: `{S3FS_OPTIONS}`; rclone options: `{' '.join(RCLONE_OPTIONS)}`.", "",
             "`link` is no loader: the pack's segments by plain GETs through the same link, 16 at a time, as the practical bound of this setup. "
             "The S3 server's and the link proxy's cores: how many of the machine's cores each kept busy over the loader's run (the bench's own process, "
             "whose Python thread is the proxy, counts as the proxy). Opens that waited: of redirfs's sample opens, the share that waited for a load "
             "(the rest were answered from memory).", "",
             "| loader | samples/s | s/epoch | of the bound | vs best of s3fs, rclone | GETs/epoch | LISTs/epoch | MiB/epoch | GETs per MiB | $ per epoch (requests) | S3 server's cores | proxy's cores | opens that waited |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        ratio = f"{r['samplesPerSecond'] / best_third:.2f}x" if best_third else "-"
        lines.append(f"| {r['loader']} | {r['samplesPerSecond']:.0f} | {r['secondsPerEpoch']:.1f} | {r['samplesPerSecond'] / bound:.2f} | {ratio} | "
                     f"{r['getsPerEpoch']:.0f} | {r['listsPerEpoch']:.0f} | {r['bytesPerEpoch'] / 2**20:.0f} | {r['getsPerMiB']:.2f} | {r['costPerEpoch']:.5f} | "
                     f"{r['serverCores']:.2f} | {r['proxyCores']:.2f} | {(format(r['openWaitFraction'], '.0%') if 'openWaitFraction' in r else '-')} |")
    with open(os.path.join(out, "latest.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    log("\n".join(lines))


def main(argv=None):
    parser = argparse.ArgumentParser(description="Training reads from a bucket through s3fs, rclone and redirfs, side by side.")
    parser.add_argument("--size", type=size_arg, default=size_arg("750M"), help="dataset size (default 750M: at 25% memory, enough for a chunk of 64 per class)")
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--data", default=os.path.join(HERE, "data"))
    parser.add_argument("--memory-fraction", type=float, default=0.25)
    parser.add_argument("--loaders", default=",".join(LOADERS))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--delay-ms", type=float, default=10, help="added each way (default 10)")
    parser.add_argument("--bandwidth", type=float, default=1e9, help="bits/s (default 1e9)")
    parser.add_argument("--segment-size", type=size_arg, default=size_arg("4M"),
                        help="pack segments (default 4M: moto reads a whole object for every ranged GET, so small ones keep it from deciding the figures)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "objects"))
    parser.add_argument("--profile", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("bench: run as root (FUSE mounts, cgroups, drop_caches)")
    for tool in ("moto_server", "aws", "s3fs", "rclone"):
        if shutil.which(tool) is None:
            sys.exit(f"bench: {tool} not found: run npm run bench (its set-up installs it)")
    os.environ.update(KEYS)
    for name in ("AWS_PROFILE", "AWS_CA_BUNDLE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(name, None)

    root, info = ensure_dataset(args.data, args.size, args.classes, args.seed)
    memory = int(info["bytes"] * args.memory_fraction)
    moto, port = start_moto()
    link = Link("127.0.0.1", port, delay=args.delay_ms / 1000, rate=args.bandwidth / 8).start()
    cache_dir = tempfile.mkdtemp(prefix="redirfs-bench-cache-", dir=args.data)
    limits = cgroup_limits.detect(CGROUP, 0, 0, "0:0")
    rows = []
    try:
        direct = f"http://127.0.0.1:{port}"
        log(f"uploading {info['files']} objects and a pack to the S3 server")
        upload(root, direct, "objects/")
        subprocess.run([REDIRFS, "pack", root, f"s3://{BUCKET}/pack", "--chunk-size", str(args.chunk_size), "--segment-size", str(args.segment_size),
                        "--s3-endpoint", direct, "--s3-path-style"], check=True, stdout=subprocess.DEVNULL)
        # Calibrate as the main bench does: what the trainer's processes need with no data (No-I/O, unlimited),
        # plus the daemon's allowance, plus the data share; no kernel cache can then hold the dataset.
        limits.set_memory_limit(-1)
        limits.reset_peak_memory()
        run_trainer(limits, root, "noio", "read", args, info)
        allowance = int(limits.peak_memory() * 1.1) + DAEMON_ALLOWANCE
        limits.set_memory_limit(allowance + memory)
        log(f"cgroup memory limit {(allowance + memory) / 2**20:.0f} MiB ({allowance / 2**20:.0f} MiB for processes)")
        for name in args.loaders.split(","):
            try:
                rows.append(measure(name, args, info, link, limits, memory, cache_dir, moto.pid))
            except Infeasible as why:
                log(f"{name}: skipped ({why})")
    finally:
        limits.close()
        link.stop()
        os.killpg(moto.pid, signal.SIGTERM)
        shutil.rmtree(cache_dir, ignore_errors=True)
    moto_version = subprocess.run(["python3", "-c", "import moto; print(moto.__version__)"], capture_output=True, text=True).stdout.strip()
    bound_seconds = info["bytes"] / (args.bandwidth / 8)
    result = {"commit": code_version(), "command": "python3 bench/objects.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "files": info["files"], "bytes": info["bytes"], "classes": info["classes"], "moto": moto_version, "delayMs": args.delay_ms,
              "bandwidthBits": args.bandwidth, "boundSeconds": bound_seconds, "boundSamplesPerSecond": info["files"] / bound_seconds,
              "workers": args.workers, "epochs": args.epochs, "memory": memory, "memoryFraction": args.memory_fraction,
              "segmentSize": args.segment_size, "rows": rows}
    write_report(result, args.out)


if __name__ == "__main__":
    main()
