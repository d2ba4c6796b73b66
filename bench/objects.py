"""The object-storage benchmark: training reads from a bucket, side by side, in one run.

An S3 server holds the bench dataset as plain objects (one per JPEG, an ImageFolder) and as redirfs
packs (K=64, the default, and the smaller chunks K=32 and K=16). The server is Ceph's RADOS Gateway
(a production S3 server, one node on loopback, brought up by scripts/rgw.sh), and optionally moto
as well (--servers rgw,moto), a mock, for comparison. Every loader reaches the server through the
same link, a proxy of this bench's own (bench/netem.py) that adds a delay each way and caps the
bandwidth, as the network to a cloud bucket does. The loaders, each a PyTorch ImageFolder +
DataLoader job reading every sample once per epoch (the read pipeline):

  s3fs               Debian's s3fs-fuse over the plain objects
  rclone             Debian's rclone mount over the plain objects
  redirfs-objects    redirfs over the plain objects (default mode)
  redirfs-pack       redirfs over the pack (default mode, K=64)
  redirfs-pack-k32   the same over a pack of K=32, and -k16 of K=16
  redirfs-pack-pool  redirfs over the K=64 pack in pool mode: whole chunks, one GET each
  redirfs-cache      redirfs over the pack with --cache-dir on local disk (epochs 2 and later read it)
  link               no loader: the pack's segments by ranged GETs of 8 MiB (as redirfs splits a large
                     read), 16 at a time, through the same link, as often as the loaders read an epoch;
                     what the link and the server deliver with nothing else on the machine, the
                     practical bound of this setup

A second, wider link (--wide-delay-ms, 50 ms each way, and --wide-bandwidth, by default no cap: the
proxy's own ceiling on this machine, the nearest it comes to a 10 Gbit/s link for a dataset this
size) runs the loaders of --wide-loaders: the case of a bucket in another region.

Each runs cold (fresh mount, page cache dropped) in a memory cgroup around the trainer and the
FUSE daemon that holds --memory plus an allowance, so no kernel cache holds the dataset. The
report gives samples/s (median of epochs 2..E), seconds per epoch, GET and LIST requests and bytes
per epoch as the link saw them, what the requests cost per epoch at S3 Standard prices, the
bound the bandwidth cap sets, redirfs's GETs in flight, and how many of the machine's cores the S3
server and the link's proxy kept busy during each loader's run (they share the cores with the
trainer and the FUSE daemon). It also records the machine's load before and after.

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
from harness import (CGROUP, DAEMON_ALLOWANCE, REDIRFS, ROOT, Infeasible, Mount, code_version, drop_caches, ensure_dataset,  # noqa: E402
                     log, run_trainer, size_arg)
from cpu import machine_busy  # noqa: E402
from netem import Link  # noqa: E402

SERVERS = ["rgw", "moto"]
LOADERS = ["s3fs", "rclone", "redirfs-objects", "redirfs-pack", "redirfs-pack-k32", "redirfs-pack-k16", "redirfs-pack-pool", "redirfs-cache", "link"]
WIDE_LOADERS = ["s3fs", "rclone", "redirfs-pack", "link"]
BUCKET = "bench"
REGION = "us-east-1"
RGW_SCRIPT = os.path.join(ROOT, "scripts", "rgw.sh")
MOTO_KEYS = {"AWS_ACCESS_KEY_ID": "redirfs-bench", "AWS_SECRET_ACCESS_KEY": "redirfs-bench-secret"}
# S3 Standard request prices (us-east-1): GET and HEAD $0.0004 per 1,000; LIST and PUT $0.005 per 1,000.
PRICE_GET = 0.0004 / 1000
PRICE_LIST = 0.005 / 1000
# What each third-party mount is given, as its documentation advises for reading many files.
S3FS_OPTIONS = "ro,use_path_request_style,enable_noobj_cache,max_stat_cache_size=100000,stat_cache_expire=3600,multireq_max=64,parallel_count=16"
RCLONE_OPTIONS = ["--read-only", "--vfs-cache-mode", "off", "--no-modtime", "--dir-cache-time", "1h", "--attr-timeout", "1h", "--transfers", "16"]
# The link row reads as redirfs's store splits a large range (src/s3/store.ts, partSize), this many at a time.
LINK_PART = 8 * 2**20
LINK_PARALLEL = 16


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid, thread=None):
    """User and system CPU seconds a process (or one of its threads) has used so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{thread}/stat" if thread else f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def clean_environment():
    """This process's environment without the machine's AWS settings (a profile, a CA bundle, an endpoint): the
    bench sets what each tool needs."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


# ---------------------------------------------------------------- servers

class RgwServer:
    """A single-node Ceph RGW (scripts/rgw.sh), its objects in the OSD's memory, gone when stopped."""
    kind = "rgw"
    provider = "Ceph"  # rclone's name for it

    def __init__(self, memory):
        self.dir = tempfile.mkdtemp(prefix="redirfs-bench-rgw-")
        done = subprocess.run(["bash", RGW_SCRIPT, "up", self.dir, "--owner", str(os.getpid()), "--memory", str(memory)],
                              capture_output=True, text=True, env=clean_environment())
        if done.returncode != 0:
            shutil.rmtree(self.dir, ignore_errors=True)
            sys.exit(f"bench: Ceph RGW did not start: {done.stderr.strip()}")
        info = json.loads(done.stdout)
        self.endpoint = info["endpoint"]
        self.port = int(self.endpoint.rsplit(":", 1)[1])
        self.keys = {"AWS_ACCESS_KEY_ID": info["accessKeyId"], "AWS_SECRET_ACCESS_KEY": info["secretAccessKey"]}
        version = subprocess.run(["radosgw", "--version"], capture_output=True, text=True).stdout.split()
        self.version = f"Ceph RGW {version[2] if len(version) > 2 else '?'} (one monitor, one memstore OSD, beast)"

    def pids(self):
        """The processes that serve S3: radosgw, the OSD that holds the objects, the monitor."""
        pids = []
        for name in ("client.rgw", "osd.0", "mon.a"):
            try:
                with open(os.path.join(self.dir, "run", f"{name}.pid")) as f:
                    pids.append(int(f.read().strip()))
            except (OSError, ValueError):
                pass
        return pids

    def stop(self):
        subprocess.run(["bash", RGW_SCRIPT, "down", self.dir], check=False)


class MotoServer:
    """moto_server, a mock: it reads the whole object for every ranged GET and serves a few hundred GETs/s here."""
    kind = "moto"
    provider = "Other"

    def __init__(self, _memory):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.keys = MOTO_KEYS
        self.process = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(self.port)], env={**clean_environment(), **self.keys},
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            self.stop()
            sys.exit("bench: moto_server did not start (the set-up installs moto[server] with pip)")
        version = subprocess.run(["python3", "-c", "import moto; print(moto.__version__)"], capture_output=True, text=True).stdout.strip()
        self.version = f"moto {version}"

    def pids(self):
        return [self.process.pid]

    def stop(self):
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.process.wait()


def server_env(server):
    """What a tool needs to reach the server directly: its keys and region, nothing else of AWS's."""
    return {**clean_environment(), **server.keys, "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION}


# What a 1 MiB ranged GET costs by the size of the object it is cut from: an object of each size is put, read at
# seeded random offsets straight from the server (no link), one GET at a time, and deleted. boto3 (the aws CLI's Python has it).
RANGE_PROBE = """
import io, json, os, random, statistics, sys, time
import boto3
from botocore.config import Config
endpoint, bucket, sizes, reads = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
s3 = boto3.client("s3", endpoint_url=endpoint, config=Config(s3={"addressing_style": "path"}))
rng, part, out = random.Random(0), 2**20, {}
for size in sizes:
    key = f"range-probe/{size}.bin"
    s3.upload_fileobj(io.BytesIO(os.urandom(size)), bucket, key)
    times = []
    for _ in range(reads):
        start = rng.randrange(0, size - part + 1)
        began = time.perf_counter()
        s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{start + part - 1}")["Body"].read()
        times.append((time.perf_counter() - began) * 1000)
    s3.delete_object(Bucket=bucket, Key=key)
    out[size] = statistics.median(times)
print(json.dumps(out))
"""
RANGE_PROBE_SIZES = [4 * 2**20, 256 * 2**20]


def range_cost(server):
    """Median ms of a 1 MiB ranged GET from an object of each of RANGE_PROBE_SIZES: why a pack's segment size matters, or not."""
    done = subprocess.run(["python3", "-c", RANGE_PROBE, server.endpoint, BUCKET, json.dumps(RANGE_PROBE_SIZES), "15"],
                          capture_output=True, text=True, env=server_env(server))
    if done.returncode != 0:
        raise RuntimeError(f"the range probe failed: {done.stderr[-2000:]}")
    return {int(size): ms for size, ms in json.loads(done.stdout).items()}


def upload(server, root, info, packs, segment_size):
    """The dataset as plain objects (the aws CLI) and as packs (redirfs pack), straight to the server, not through the link."""
    env = server_env(server)
    subprocess.run(["aws", "s3api", "create-bucket", "--bucket", BUCKET, "--endpoint-url", server.endpoint], check=True, stdout=subprocess.DEVNULL, env=env)
    started = time.time()
    subprocess.run(["aws", "s3", "cp", "--recursive", "--quiet", "--exclude", ".*", "--endpoint-url", server.endpoint, root, f"s3://{BUCKET}/objects"],
                   check=True, env=env)
    log(f"{server.kind}: {info['files']} objects put in {time.time() - started:.0f} s")
    for k in packs:
        segments = ("--segment-size", str(segment_size)) if segment_size else ()
        subprocess.run([REDIRFS, "pack", root, f"s3://{BUCKET}/pack-k{k}", "--chunk-size", str(k), *segments,
                        "--s3-endpoint", server.endpoint, "--s3-path-style"], check=True, stdout=subprocess.DEVNULL, env=env)


# ---------------------------------------------------------------- measuring

class Sampler:
    """The link's counters, a redirfs mount's requests in flight and opens, and the CPU of the machine and of
    each party, every quarter second, so a run's requests can be cut into its epochs and its course followed
    (a slow stretch of the link: whether GETs were out, and who was busy meanwhile)."""

    def __init__(self, link, mount=None, server=None):
        self.link = link
        self.mount = mount
        self.server = server
        # (time, the link's counters, (GETs in flight, opens, opens that waited, share of --memory in use) or None,
        #  CPU seconds so far: (the machine, the daemon's main thread, the daemon, the S3 server, the proxy))
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _mount_now(self):
        if self.mount is None:
            return None
        try:
            stats = self.mount.stats()
            p, m = stats["protocol"], stats["memory"]
            used = (p["residentBytes"] + p["inflightBytes"] + m["boundBytes"]) / max(1, m["budgetBytes"])
            return (stats["source"]["inFlight"], p["opens"], p["waitedOpens"], round(used, 3))
        except (OSError, ValueError, KeyError):
            return None

    def _cpu_now(self):
        daemon = self.mount.pid if self.mount is not None else None
        return (machine_busy(), cpu_seconds(daemon, thread=daemon) if daemon else 0.0, cpu_seconds(daemon) if daemon else 0.0,
                sum(cpu_seconds(pid) for pid in self.server.pids()) if self.server is not None else 0.0, cpu_seconds(os.getpid()))

    def _sample(self, with_mount=True):
        self.samples.append((time.time(), self.link.stats(), self._mount_now() if with_mount else None, self._cpu_now()))

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.25)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample(with_mount=False)

    def between(self, start, end):
        """The link's counters from `start` to `end` (wall clock)."""
        def at(t):
            before = [s for when, s, _, _ in self.samples if when <= t]
            return before[-1] if before else self.samples[0][1]
        a, b = at(start), at(end)
        return {key: b[key] - a[key] for key in b}

    def mean_in_flight(self, start, end):
        values = [m[0] for when, _, m, _ in self.samples if m is not None and start <= when <= end]
        return statistics.mean(values) if values else None

    TIMELINE = ["seconds", "MiB/s down the link", "GETs in flight", "opens", "opens that waited so far",
                "share of --memory in use (resident, loading and bound to handles)",
                "machine's cores busy", "daemon's main thread (cores)", "daemon (cores)", "S3 server (cores)", "proxy (cores)"]

    def timeline(self, start, end):
        """Quarter-second steps from `start`, each a list in the order of TIMELINE."""
        out = []
        for (t0, a, _, c0), (t1, b, m, c1) in zip(self.samples, self.samples[1:]):
            if start <= t1 <= end:
                seconds = max(1e-9, t1 - t0)
                mount = list(m) if m is not None else [None, None, None, None]
                out.append([round(t1 - start, 2), round((b["bytesDown"] - a["bytesDown"]) / seconds / 2**20, 1), *mount,
                            *(round((y - x) / seconds, 2) for x, y in zip(c0, c1))])
        return out


class ThirdPartyMount:
    """s3fs or rclone over the plain objects, its daemon put in the cgroup."""

    def __init__(self, kind, server, link, limits):
        self.kind = kind
        self.mountpoint = tempfile.mkdtemp(prefix=f"redirfs-bench-{kind}-")
        env = clean_environment()
        if kind == "s3fs":
            self.passwd = tempfile.NamedTemporaryFile("w", delete=False, prefix="redirfs-bench-s3fs-")
            self.passwd.write(f"{server.keys['AWS_ACCESS_KEY_ID']}:{server.keys['AWS_SECRET_ACCESS_KEY']}\n")
            self.passwd.close()
            os.chmod(self.passwd.name, 0o600)
            command = ["s3fs", f"{BUCKET}:/objects", self.mountpoint, "-o", f"{S3FS_OPTIONS},url={link.endpoint},passwd_file={self.passwd.name}"]
        else:
            command = ["rclone", "mount", f":s3:{BUCKET}/objects", self.mountpoint, "--s3-provider", server.provider, "--s3-endpoint", link.endpoint,
                       "--s3-access-key-id", server.keys["AWS_ACCESS_KEY_ID"], "--s3-secret-access-key", server.keys["AWS_SECRET_ACCESS_KEY"],
                       "--s3-region", REGION, "--s3-force-path-style", "--daemon", *RCLONE_OPTIONS]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        for _ in range(600):
            if os.path.ismount(self.mountpoint) and os.listdir(self.mountpoint):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"{kind} did not mount")
        self.pids = [int(pid) for pid in subprocess.run(["pgrep", "-f", self.mountpoint], capture_output=True, text=True).stdout.split()]
        for pid in self.pids:
            limits.add(pid)

    def close(self):
        subprocess.run(["umount", "-l", self.mountpoint], check=False)
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
        shutil.rmtree(self.mountpoint, ignore_errors=True)
        if self.kind == "s3fs":
            os.remove(self.passwd.name)


# Ranged GETs of every pack segment, LINK_PARALLEL at a time, once per epoch: boto3 (the aws CLI's Python has it).
LINK_READER = """
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
import boto3
from botocore.config import Config
endpoint, bucket, prefix, epochs, part, parallel = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
s3 = boto3.client("s3", endpoint_url=endpoint, config=Config(max_pool_connections=parallel, s3={"addressing_style": "path"}))
objects = [(o["Key"], o["Size"]) for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix) for o in page.get("Contents", [])]
ranges = [(key, start, min(size, start + part) - 1) for key, size in objects for start in range(0, size, part)]
def get(r):
    return len(s3.get_object(Bucket=bucket, Key=r[0], Range=f"bytes={r[1]}-{r[2]}")["Body"].read())
out = []
with ThreadPoolExecutor(parallel) as pool:
    for _ in range(epochs):
        started = time.time()
        sum(pool.map(get, ranges))
        out.append([started, time.time()])
print(json.dumps(out))
"""


def read_link(server, link, epochs, info):
    """The `link` row: the pack's segments by ranged GETs through the link; no FUSE, no trainer."""
    done = subprocess.run(["python3", "-c", LINK_READER, link.endpoint, BUCKET, "pack-k64/segments/", str(epochs), str(LINK_PART), str(LINK_PARALLEL)],
                          capture_output=True, text=True, env=server_env(server))
    if done.returncode != 0:
        raise RuntimeError(f"the link reader failed: {done.stderr[-2000:]}")
    return [{"started": a, "ended": b, "seconds": b - a, "samples": info["files"]} for a, b in json.loads(done.stdout)]


def measure(name, server, link, args, info, limits, memory, cache_dir):
    drop_caches()
    mount = None
    extra = {}
    server_cpu = lambda: sum(cpu_seconds(pid) for pid in server.pids())  # noqa: E731
    if name == "link":
        cpu = (server_cpu(), cpu_seconds(os.getpid()), machine_busy())
        with Sampler(link, server=server) as sampler:
            started = time.time()
            epochs = read_link(server, link, args.epochs, info)
            ended = time.time()
        return row_of(name, epochs, sampler, started, ended, cpu, server_cpu, extra)
    try:
        if name in ("s3fs", "rclone"):
            mount = ThirdPartyMount(name, server, link, limits)
        else:
            k = name.rsplit("-k", 1)[1] if "-k" in name else "64"
            source = f"s3://{BUCKET}/objects" if name == "redirfs-objects" else f"s3://{BUCKET}/pack-k{k}"
            cache = ("--cache-dir", cache_dir) if name == "redirfs-cache" else ()
            chunk = ("--chunk-size", str(args.chunk_size)) if name == "redirfs-objects" else ()
            mode = "pool" if name == "redirfs-pack-pool" else "mix"
            mount = Mount(source, mode, memory, limits, ("--s3-endpoint", link.endpoint, "--s3-path-style", *cache, *chunk), env=server_env(server))
        cpu = (server_cpu(), cpu_seconds(os.getpid()), machine_busy())
        daemon_cpu = sum(cpu_seconds(pid) for pid in ([mount.pid] if isinstance(mount, Mount) else mount.pids))
        with Sampler(link, mount if isinstance(mount, Mount) else None, server) as sampler:
            started = time.time()
            epochs, _ = run_trainer(limits, mount.mountpoint, "imagefolder", "read", args, info)
            ended = time.time()
        extra["daemonCores"] = (sum(cpu_seconds(pid) for pid in ([mount.pid] if isinstance(mount, Mount) else mount.pids)) - daemon_cpu) / max(1e-9, ended - started)
        if isinstance(mount, Mount):
            stats = mount.stats()
            extra["redirfsSource"] = stats["source"]
            extra["openWaitFraction"] = stats["protocol"]["waitedOpens"] / max(1, stats["protocol"]["opens"])
            extra["daemonPeakRssBytes"] = mount.peak_rss()
            later = epochs[1:] or epochs
            extra["getsInFlight"] = sampler.mean_in_flight(later[0]["started"], later[-1]["ended"])
            extra["timeline"] = sampler.timeline(epochs[0]["started"], epochs[-1]["ended"])
            extra["slowLink"] = slow_link(extra["timeline"], later[0]["started"] - epochs[0]["started"], link.rate)
    finally:
        if mount is not None:
            mount.close()
    return row_of(name, epochs, sampler, started, ended, cpu, server_cpu, extra)


def slow_link(timeline, measured_from, rate):
    """Over the measured epochs, the quarter-seconds in which the link carried less than half its cap: how
    much of the time, and what was going on then (GETs out, and who kept the cores busy). None on no cap."""
    if rate == float("inf"):
        return None
    steps = [step for step in timeline if step[0] >= measured_from]
    slow = [step for step in steps if step[1] < rate / 2**20 / 2]
    if not steps or not slow:
        return {"share": 0.0} if steps else None
    mean = lambda i: statistics.mean(step[i] for step in slow if step[i] is not None)  # noqa: E731
    return {"share": len(slow) / len(steps), "getsInFlight": mean(2), "noGetOut": sum(1 for step in slow if step[2] == 0) / len(slow),
            "memoryInUse": mean(5), "machineCores": mean(6), "daemonMainThreadCores": mean(7), "daemonCores": mean(8), "serverCores": mean(9),
            "proxyCores": mean(10)}


def measured(name, *args):
    """A loader's row, or one that says why there is none (a mount refused, a trainer that failed): the run goes on."""
    try:
        return measure(name, *args)
    except (Infeasible, RuntimeError) as why:
        log(f"{name}: no figures ({why})")
        return {"loader": name, "failed": str(why).splitlines()[0]}


def row_of(name, epochs, sampler, started, ended, cpu, server_cpu, extra):
    """A loader's row: rates over epochs 2.., the link's counters per epoch, and the cores the server and the proxy kept busy."""
    wall = max(1e-9, ended - started)
    extra = {**extra, "serverCores": (server_cpu() - cpu[0]) / wall, "proxyCores": (cpu_seconds(os.getpid()) - cpu[1]) / wall,
             "machineCores": (machine_busy() - cpu[2]) / wall}
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
    log(f"{name:16s} {row['samplesPerSecond']:8.0f} samples/s  {row['secondsPerEpoch']:6.1f} s/epoch  {gets:8.0f} GETs  {down / 2**20:7.0f} MiB per epoch"
        + (f"  {extra['getsInFlight']:.1f} GETs in flight" if extra.get("getsInFlight") is not None else ""))
    return row


def machine_load():
    """What else the machine was doing: the load average and the busiest processes (the bench's own included)."""
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    top = subprocess.run(["ps", "-eo", "pcpu,comm", "--sort=-pcpu", "--no-headers"], capture_output=True, text=True).stdout.splitlines()[:5]
    return {"loadavg": [float(x) for x in load], "busiest": [" ".join(line.split()) for line in top]}


# ---------------------------------------------------------------- one server

def run_server(kind, args, root, info, memory, limits):
    """Every loader against one server, over the link and then the wide link: the server's table and the wide one."""
    server = (RgwServer if kind == "rgw" else MotoServer)(args.server_memory)
    # moto reads the whole object for every ranged GET: small segments keep it from deciding the figures.
    segment_size = args.segment_size or (4 * 2**20 if kind == "moto" else 0)
    loaders = [name for name in args.loaders.split(",") if name]
    wide = [name for name in args.wide_loaders.split(",") if name] if args.wide_delay_ms > 0 else []
    packs = sorted({int(name.rsplit("-k", 1)[1]) if "-k" in name else 64 for name in loaders + wide if "pack" in name or name in ("redirfs-cache", "link")})
    cache_dir = tempfile.mkdtemp(prefix="redirfs-bench-cache-", dir=args.data)
    links = []
    result = {"server": kind, "serverVersion": server.version, "segmentSize": segment_size or None, "rows": [], "wideRows": [],
              "timelineFields": Sampler.TIMELINE}
    try:
        log(f"{kind}: uploading {info['files']} objects and packs of K={', '.join(map(str, packs))} to the S3 server")
        upload(server, root, info, packs, segment_size)
        result["rangeGetMs"] = range_cost(server)
        log(f"{kind}: a 1 MiB ranged GET takes " + ", ".join(f"{ms:.0f} ms from a {size // 2**20} MiB object" for size, ms in result["rangeGetMs"].items()))
        link = Link("127.0.0.1", server.port, delay=args.delay_ms / 1000, rate=args.bandwidth / 8).start()
        links.append(link)
        for name in loaders:
            result["rows"].append(measured(name, server, link, args, info, limits, memory, cache_dir))
        if wide:
            wide_link = Link("127.0.0.1", server.port, delay=args.wide_delay_ms / 1000, rate=args.wide_bandwidth / 8 if args.wide_bandwidth else float("inf")).start()
            links.append(wide_link)
            for name in wide:
                # s3fs and rclone cache nothing between epochs here: one epoch of theirs is any epoch, and at this delay a long one.
                epochs = 1 if name in ("s3fs", "rclone") else args.wide_epochs
                wide_args = argparse.Namespace(**{**vars(args), "epochs": epochs})
                result["wideRows"].append(measured(name, server, wide_link, wide_args, info, limits, memory, cache_dir))
    finally:
        for link in links:
            link.stop()
        server.stop()
        shutil.rmtree(cache_dir, ignore_errors=True)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description="Training reads from a bucket through s3fs, rclone and redirfs, side by side.")
    parser.add_argument("--size", type=size_arg, default=size_arg("750M"), help="dataset size (default 750M: at 25%% memory, enough for a chunk of 64 per class)")
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--data", default=os.path.join(HERE, "data"))
    parser.add_argument("--memory-fraction", type=float, default=0.25)
    parser.add_argument("--servers", default="rgw", help="rgw (Ceph RGW, the default), moto, or both: rgw,moto")
    parser.add_argument("--loaders", default=",".join(LOADERS))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=64, help="redirfs-objects's chunk size (the packs' are in the loaders' names)")
    parser.add_argument("--delay-ms", type=float, default=10, help="added each way (default 10)")
    parser.add_argument("--bandwidth", type=float, default=1e9, help="bits/s (default 1e9)")
    parser.add_argument("--wide-delay-ms", type=float, default=50, help="the wide link's delay each way (default 50; 0: no wide link)")
    parser.add_argument("--wide-bandwidth", type=float, default=0, help="the wide link's bits/s (default 0: no cap, the proxy's own ceiling)")
    parser.add_argument("--wide-loaders", default=",".join(WIDE_LOADERS))
    parser.add_argument("--wide-epochs", type=int, default=2)
    parser.add_argument("--segment-size", type=size_arg, default=0,
                        help="pack segments (default: redirfs pack's own, 256M, on RGW; 4M on moto, which reads a whole object for every ranged GET)")
    parser.add_argument("--server-memory", type=size_arg, default=size_arg("16G"), help="what RGW's memstore OSD may hold (default 16G)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "objects"))
    parser.add_argument("--profile", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("bench: run as root (FUSE mounts, cgroups, drop_caches)")
    servers = [name for name in args.servers.split(",") if name]
    unknown = set(servers) - set(SERVERS)
    if unknown:
        sys.exit(f"bench: unknown servers {', '.join(sorted(unknown))}; known: {', '.join(SERVERS)}")
    tools = ["aws", "s3fs", "rclone"] + (["radosgw", "ceph-mon", "ceph-osd"] if "rgw" in servers else []) + (["moto_server"] if "moto" in servers else [])
    for tool in tools:
        if shutil.which(tool) is None:
            sys.exit(f"bench: {tool} not found: run npm run bench (its set-up installs it)")
    # Each tool gets the server's keys and region explicitly; nothing of the machine's AWS settings reaches them.
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        del os.environ[name]

    root, info = ensure_dataset(args.data, args.size, args.classes, args.seed)
    memory = int(info["bytes"] * args.memory_fraction)
    limits = cgroup_limits.detect(CGROUP, 0, 0, "0:0")
    load_before = machine_load()
    log(f"machine load before: {load_before}")
    results = []
    try:
        # Calibrate as the main bench does: what the trainer's processes need with no data (No-I/O, unlimited),
        # plus the daemon's allowance, plus the data share; no kernel cache can then hold the dataset.
        limits.set_memory_limit(-1)
        limits.reset_peak_memory()
        run_trainer(limits, root, "noio", "read", args, info)
        allowance = int(limits.peak_memory() * 1.1) + DAEMON_ALLOWANCE
        limits.set_memory_limit(allowance + memory)
        log(f"cgroup memory limit {(allowance + memory) / 2**20:.0f} MiB ({allowance / 2**20:.0f} MiB for processes)")
        for kind in servers:
            results.append(run_server(kind, args, root, info, memory, limits))
    finally:
        limits.close()
    bound_seconds = info["bytes"] / (args.bandwidth / 8)
    result = {"commit": code_version(), "command": "python3 bench/objects.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "files": info["files"], "bytes": info["bytes"], "classes": info["classes"], "delayMs": args.delay_ms,
              "bandwidthBits": args.bandwidth, "boundSeconds": bound_seconds, "boundSamplesPerSecond": info["files"] / bound_seconds,
              "wideDelayMs": args.wide_delay_ms, "wideBandwidthBits": args.wide_bandwidth, "wideEpochs": args.wide_epochs,
              "workers": args.workers, "epochs": args.epochs, "memory": memory, "memoryFraction": args.memory_fraction,
              "machine": {"before": load_before, "after": machine_load()}, "servers": results}
    write_report(result, args.out)


# ---------------------------------------------------------------- report

TABLE_HEAD = ["| loader | samples/s | s/epoch | of the bound | vs best of s3fs, rclone | GETs/epoch | LISTs/epoch | MiB/epoch | GETs per MiB | "
              "$ per epoch (requests) | GETs in flight | FUSE daemon's cores | S3 server's cores | proxy's cores | machine's cores busy | opens that waited |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def table(rows, bound):
    """One loader a line; `bound` is samples/s (the bandwidth cap's, or the link row's on an uncapped link)."""
    by_name = {r["loader"]: r for r in rows if "failed" not in r}
    best_third = max((by_name[k]["samplesPerSecond"] for k in ("s3fs", "rclone") if k in by_name), default=None)
    lines = list(TABLE_HEAD)
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['loader']} | failed: {r['failed']} |" + " - |" * 14)
            continue
        ratio = f"{r['samplesPerSecond'] / best_third:.2f}x" if best_third else "-"
        of_bound = f"{r['samplesPerSecond'] / bound:.2f}" if bound else "-"
        in_flight = f"{r['getsInFlight']:.1f}" if r.get("getsInFlight") is not None else "-"
        waited = format(r["openWaitFraction"], ".0%") if "openWaitFraction" in r else "-"
        daemon_cores = f"{r['daemonCores']:.2f}" if "daemonCores" in r else "-"
        machine_cores = f"{r['machineCores']:.2f} of {os.cpu_count()}" if "machineCores" in r else "-"
        lines.append(f"| {r['loader']} | {r['samplesPerSecond']:.0f} | {r['secondsPerEpoch']:.1f} | {of_bound} | {ratio} | "
                     f"{r['getsPerEpoch']:.0f} | {r['listsPerEpoch']:.0f} | {r['bytesPerEpoch'] / 2**20:.0f} | {r['getsPerMiB']:.2f} | {r['costPerEpoch']:.5f} | "
                     f"{in_flight} | {daemon_cores} | {r['serverCores']:.2f} | {r['proxyCores']:.2f} | {machine_cores} | {waited} |")
    return lines


def write_report(result, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "latest.json"), "w") as f:
        json.dump(result, f, indent=1)
    bound = result["boundSamplesPerSecond"]
    m = result["machine"]
    lines = [f"Run on commit {result['commit']}: `{result['command']}`", "",
             f"{result['files']} JPEGs, {result['bytes'] / 2**20:.0f} MiB, {result['classes']} classes; "
             f"the link: {result['delayMs']:.0f} ms each way and {result['bandwidthBits'] / 1e9:.1f} Gbit/s ({result['bandwidthBits'] / 8 / 2**20:.0f} MiB/s) by bench/netem.py, "
             f"which bounds an epoch at {result['boundSeconds']:.1f} s ({bound:.0f} samples/s); {result['workers']} DataLoader workers, read pipeline, "
             f"{result['epochs']} epochs, figures over epochs 2..{result['epochs']}; redirfs --memory {result['memory'] / 2**20:.0f} MiB "
             f"({result['memoryFraction']:.0%} of the dataset), default mode (mix).", "",
             f"s3fs options: `{S3FS_OPTIONS}`; rclone options: `{' '.join(RCLONE_OPTIONS)}`.", "",
             f"`link` is no loader: the K=64 pack's segments by ranged GETs of {LINK_PART // 2**20} MiB through the same link, {LINK_PARALLEL} at a time, "
             "as the practical bound of this setup. GETs in flight: redirfs's requests in flight, sampled every quarter second over the measured epochs. "
             "The FUSE daemon's, the S3 server's and the link proxy's cores: how many of the machine's cores each kept busy over the loader's run (RGW counts its gateway, "
             "OSD and monitor; the bench's own process, whose Python thread is the proxy, counts as the proxy); the machine's cores busy: all of its cores' "
             "time not idle (nor waiting for I/O) over the loader's run, whoever spent it (the trainer's workers are the rest). Opens that waited: of redirfs's sample "
             "opens, the share that waited for a load (the rest were answered from memory).", "",
             f"The machine (2 cores, shared): load average {' / '.join(map(str, m['before']['loadavg']))} before the run, "
             f"{' / '.join(map(str, m['after']['loadavg']))} after; busiest processes before: {'; '.join(m['before']['busiest'])}.", ""]
    for server in result["servers"]:
        segments = f"pack segments of {server['segmentSize'] / 2**20:.0f} MiB" if server["segmentSize"] else "pack segments of redirfs pack's default size"
        probe = "; ".join(f"{ms:.1f} ms from a {int(size) // 2**20} MiB object" for size, ms in server.get("rangeGetMs", {}).items())
        lines += [f"### {server['serverVersion']}", "", f"On loopback, {segments}. A 1 MiB ranged GET straight from the server (median of 15, one at a time): {probe}.", ""]
        lines += table(server["rows"], bound) + [""]
        slow = [(r["loader"], r["slowLink"]) for r in server["rows"] if r.get("slowLink")]
        if slow:
            lines += ["Where the link slowed (redirfs's rows): the quarter-seconds of the measured epochs in which it carried less than half "
                      "its cap, and the means over them of redirfs's GETs in flight, the share of its --memory in use (resident, loading, bound "
                      "to open files) and the cores each party kept busy.", "",
                      "| loader | share of the time | GETs in flight | none out | --memory in use | machine's cores busy | daemon's main thread | daemon | S3 server | proxy |",
                      "|---|---|---|---|---|---|---|---|---|---|"]
            for name, w in slow:
                if w["share"] == 0:
                    lines.append(f"| {name} | 0% |" + " - |" * 8)
                    continue
                lines.append(f"| {name} | {w['share']:.0%} | {w['getsInFlight']:.1f} | {w['noGetOut']:.0%} | {w['memoryInUse']:.0%} | {w['machineCores']:.2f} of {os.cpu_count()} | "
                             f"{w['daemonMainThreadCores']:.2f} | {w['daemonCores']:.2f} | {w['serverCores']:.2f} | {w['proxyCores']:.2f} |")
            lines.append("")
        if server["wideRows"]:
            rows = server["wideRows"]
            link_row = next((r for r in rows if r["loader"] == "link" and "failed" not in r), None)
            wide_bound = result["bytes"] / (result["wideBandwidthBits"] / 8) if result["wideBandwidthBits"] else None
            wide_bound_rate = result["files"] / wide_bound if wide_bound else (link_row["samplesPerSecond"] if link_row else None)
            cap = f"{result['wideBandwidthBits'] / 1e9:.1f} Gbit/s" if result["wideBandwidthBits"] else "no bandwidth cap (the proxy's own ceiling)"
            lines += [f"**A wider network**, the same server: {result['wideDelayMs']:.0f} ms each way and {cap}; {result['wideEpochs']} epochs, "
                      f"figures over epochs 2..{result['wideEpochs']} (s3fs and rclone, which cache nothing between epochs here: one epoch, its figure); "
                      "of the bound: " + ("of the cap's." if wide_bound else "of the link row's."), ""]
            lines += table(rows, wide_bound_rate) + [""]
    with open(os.path.join(out, "latest.md"), "w") as f:
        f.write("\n".join(lines))
    log("\n".join(lines))


if __name__ == "__main__":
    main()
