"""redirfs benchmarks: every loader side by side, in one run, under real limits.

  npm run bench -- [options]        (or /usr/bin/python3 bench/run.py --help)

What one run does (docs/design.md, "How we measure"):
- makes a JPEG ImageFolder (mean ~110 KB, --size, kept in --data between runs) and packs of it;
- puts the trainer *and* the redirfs daemon in a cgroup memory limit (process allowance plus
  --memory-fraction of the dataset, so the page cache cannot hold the dataset) and a read throttle
  on the data disk, in cgroup v1 or v2, whichever the machine has (bench/limits.py) (--profile nas: 500 IOPS, 200 MB/s; ssd: none; or --iops/--bps);
- drops the page cache before each loader, runs it for --epochs, and reads what the device served;
- compares PyTorch ImageFolder on the raw directory, a CoorDL-style static cache of the same memory,
  redirfs (strict/pool/mix/off over the directory and over a pack), FFCV over its own converted copy
  (full pipeline only) and No-I/O, for the read-only and the
  full (decode + RandomResizedCrop + ToTensor) pipeline;
- optionally sweeps the chunk size (--sweep) and measures the FUSE hot path (--hot-path);
- writes bench/results/latest.{json,md,svg}; restores every cgroup setting at the end.
"""
import argparse
import concurrent.futures
import datetime
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import limits as cgroups
from cpu import Sampler, cpu_by_thread_kind, cpu_seconds, thread_cpu, thread_kinds
from harness import (CGROUP, DAEMON_ALLOWANCE, HERE, PYTHON, REDIRFS, ROOT, TRAINER, Infeasible, Mount, code_version, drop_caches,
                     ensure_dataset, log, peak_rss, run_trainer, size_arg)

PROFILES = {"nas": (500, 200 * 10**6), "ssd": (0, 0)}
ALL_LOADERS = ["pytorch", "static", "strict", "pool", "mix", "off", "pack-strict", "pack-pool", "pack-mix", "ffcv", "noio"]
FULL_ONLY = {"ffcv"}  # loaders that only make sense with decoding (FFCV decodes in its own pipeline)


# ---------------------------------------------------------------- packs

PACK_SEED = 0  # `redirfs pack`'s default --seed, which the bench uses


def pack_header(pack):
    """The header of a pack's index as this redirfs reads it, or why it cannot be read."""
    script = ("const f = require('./dist/pack/format');"
              "try { const h = f.decodeIndex(require('fs').readFileSync(process.argv[1]), process.argv[1]).header;"
              "  console.log(JSON.stringify(h)) } catch (e) { console.log(JSON.stringify({ unreadable: e.message })) }")
    done = subprocess.run(["node", "-e", script, os.path.join(pack, "index.bin")], check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(done.stdout)


def stale_pack(pack, chunk_size, info, layout):
    """Why a cached pack is not the one this run would write (format, K, seed, layout, or the
    dataset's files), or None."""
    header = pack_header(pack)
    if "unreadable" in header:
        return header["unreadable"]
    header.setdefault("layout", "class")  # format 4 names none: the class layout
    wanted = {"chunkSize": chunk_size, "seed": PACK_SEED, "layout": layout, "samples": info["files"], "sampleBytes": info["bytes"]}
    differs = [f"{key} {header.get(key)} (wanted {value})" for key, value in wanted.items() if header.get(key) != value]
    return ", ".join(differs) or None


def ensure_pack(data_dir, root, chunk_size, info, layout="class"):
    """A pack of `root` written by this redirfs with K=`chunk_size` in `layout`; a cached one that
    differs (older format, other K, seed or layout, or packed from an earlier dataset) is written again."""
    pack = os.path.join(data_dir, os.path.basename(root) + f".pack-k{chunk_size}" + ("" if layout == "class" else f"-{layout}"))
    if os.path.exists(os.path.join(pack, "index.bin")):
        why = stale_pack(pack, chunk_size, info, layout)
        if why:
            log(f"{pack} is stale ({why}): packing again")
            shutil.rmtree(pack)
    if not os.path.exists(os.path.join(pack, "index.bin")):
        shutil.rmtree(pack, ignore_errors=True)
        for partial in glob.glob(pack + ".partial-*"):
            shutil.rmtree(partial, ignore_errors=True)
        log(f"packing {root} with K={chunk_size}, {layout} layout")
        subprocess.run([REDIRFS, "pack", root, pack, "--chunk-size", str(chunk_size), "--seed", str(PACK_SEED), "--layout", layout], check=True, stdout=subprocess.DEVNULL)
    return pack


def ensure_beton(data_dir, root, info):
    """FFCV's copy of the dataset (bench/ffcv_loader.py), written once; one written by another
    conversion or from another dataset is written again."""
    import ffcv_loader
    beton = os.path.join(data_dir, os.path.basename(root) + ".beton")
    marker = beton + ".json"
    wanted = {"format": ffcv_loader.BETON_FORMAT, "samples": info["files"], "sampleBytes": info["bytes"]}
    if os.path.exists(marker) and os.path.exists(beton):
        with open(marker) as f:
            made = json.load(f)
        if {key: made.get(key) for key in wanted} == wanted:
            return beton
        log(f"{beton} was written from {made}, this bench needs {wanted}: converting again")
    for stale in (marker, beton):
        if os.path.exists(stale):
            os.remove(stale)
    log(f"converting {root} to FFCV's format: {beton} (once; kept for later runs)")
    started = time.time()
    done = subprocess.run([PYTHON, os.path.join(HERE, "ffcv_loader.py"), "write", root, beton], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench: converting {root} to FFCV's format failed (is Debian's python3-ffcv installed?):\n{done.stderr[-3000:]}")
    with open(marker, "w") as f:
        json.dump({**wanted, "bytes": os.path.getsize(beton), "pageBytes": ffcv_loader.PAGE_SIZE, "seconds": time.time() - started}, f)
    return beton


def beton_info(beton):
    with open(beton + ".json") as f:
        return json.load(f)


# ---------------------------------------------------------------- limits

def device_of(path):
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


# ---------------------------------------------------------------- runs

def measure(name, pipeline, args, info, sources, limits, memory):
    drop_caches(ffcv=name == "ffcv")
    before = limits.device_reads()
    mount = None
    extra = {}
    try:
        # Every loader runs under the sampler, so each row says how busy the cores were and what a sample cost them.
        if name == "ffcv":
            with Sampler([], limits.device_reads) as sampler:
                epochs, _ = run_trainer(limits, sources["beton"], "ffcv", pipeline, args, info)
            extra["cpu"] = measured_window(sampler, [epochs], {})
            made = beton_info(sources["beton"])
            extra.update({key: made[key] for key in ("bytes", "pageBytes", "seconds")})
        elif name in ("pytorch", "static", "noio"):
            loader = {"pytorch": "imagefolder", "static": "static", "noio": "noio"}[name]
            with Sampler([], limits.device_reads) as sampler:
                epochs, static = run_trainer(limits, sources["dir"], loader, pipeline, args, info, cache_bytes=memory)
            extra["cpu"] = measured_window(sampler, [epochs], {})
            extra.update(static)
        else:
            mode = name.split("-")[-1]
            source = sources["pack"] if name.startswith("pack-") else sources["dir"]
            mount = Mount(source, mode, memory, limits, () if name.startswith("pack-") else ("--chunk-size", str(args.chunk_size)))
            with Sampler([mount.pid], limits.device_reads) as sampler:
                epochs, _ = run_trainer(limits, mount.mountpoint, "imagefolder", pipeline, args, info)
            extra["cpu"] = measured_window(sampler, [epochs], {mount.pid: thread_kinds(mount.pid, thread_cpu(mount.pid))})
            stats = mount.stats()
            p = stats["protocol"]
            extra.update({"openWaitFraction": p["waitedOpens"] / max(1, p["opens"]), "chunkLoadsPerPcPerEpoch": p["chunkLoads"] / stats["layout"]["physicalChunks"] / args.epochs,
                          "daemonPeakRssBytes": mount.peak_rss(), "daemonCpuSecondsPerEpoch": mount.cpu_seconds() / args.epochs,
                          "redirects": p["redirects"], "opens": p["opens"]})
    finally:
        if mount:
            mount.close()
    after = limits.device_reads()
    later = [e["samples"] / e["seconds"] for e in epochs[1:]] or [e["samples"] / e["seconds"] for e in epochs]
    row = {"loader": name, "pipeline": pipeline, "samplesPerSecond": statistics.median(later), "epochs": epochs,
           "deviceBytes": after[0] - before[0], "deviceOps": after[1] - before[1],
           "readAmplification": (after[0] - before[0]) / args.epochs / info["bytes"], **extra}
    log(f"{pipeline:5s} {name:12s} {row['samplesPerSecond']:8.0f} samples/s  device {row['deviceBytes'] / 2**20:8.0f} MiB in {row['deviceOps']} ops")
    return row


# ---------------------------------------------------------------- cluster

def free_ports(count):
    import socket
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def measure_cluster(nodes, args, info, source, limits, memory, allowance):
    """N redirfs nodes on loopback over one shared pack (pool), N DistributedSampler trainers, one cgroup.

    Each node gets the memory one node gets elsewhere; the cgroup holds N times one node's processes
    and data share; the read throttle is shared, as a NAS is. Throughput = all ranks' samples over the
    slowest rank's epoch time."""
    drop_caches()
    limits.set_memory_limit(nodes * (allowance + memory))
    before = limits.device_reads()
    ports = free_ports(nodes + 1)
    peers = ",".join(f"127.0.0.1:{port}" for port in ports[:nodes])
    token = tempfile.NamedTemporaryFile("w", delete=False)
    token.write(os.urandom(24).hex())
    token.close()
    os.chmod(token.name, 0o600)
    mountpoints = [tempfile.mkdtemp(prefix=f"redirfs-bench-node{i}-") for i in range(nodes)]
    launches = [subprocess.Popen([REDIRFS, "mount", source, mountpoints[i], "--memory", str(memory), "--redirect", "pool", "--log-level", "warn",
                                  "--node", str(i), "--peers", peers, "--token-file", token.name],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(nodes)]
    errors = [launch.communicate()[1] for launch in launches]
    try:
        if any(launch.returncode != 0 for launch in launches):
            raise RuntimeError("cluster mount failed: " + " | ".join(e.strip() for e in errors if e.strip()))
        pids = []
        for mountpoint in mountpoints:
            with open(os.path.join(mountpoint, ".redirfs", "stats")) as f:
                pids.append(json.load(f)["pid"])
        for pid in pids:
            limits.add(pid)
        with Sampler(pids, limits.device_reads) as sampler:
            trainers = [subprocess.Popen(limits.wrap([PYTHON, TRAINER, mountpoints[rank], "--loader", "imagefolder", "--pipeline", "read", "--epochs", str(args.epochs),
                                                      "--workers", str(args.workers), "--batch-size", str(args.batch_size), "--world", str(nodes), "--rank", str(rank),
                                                      "--port", str(ports[nodes])]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(nodes)]
            outputs = [trainer.communicate() for trainer in trainers]
        if any(trainer.returncode != 0 for trainer in trainers):
            raise RuntimeError("a cluster trainer failed: " + " | ".join(err[-500:] for _, err in outputs))
        per_rank = [[json.loads(line) for line in out.splitlines() if line.startswith("{") and "epoch" in line] for out, _ in outputs]
        epochs = [{"epoch": e, "samples": sum(rank[e]["samples"] for rank in per_rank), "seconds": max(rank[e]["seconds"] for rank in per_rank)} for e in range(args.epochs)]
        stats = []
        for mountpoint in mountpoints:
            with open(os.path.join(mountpoint, ".redirfs", "stats")) as f:
                stats.append(json.load(f))
        rss = [peak_rss(pid) for pid in pids]
        cpu_window = measured_window(sampler, per_rank, {pid: thread_kinds(pid, thread_cpu(pid)) for pid in pids})
        cpu = sum(cpu_seconds(pid) for pid in pids)
    finally:
        for mountpoint in mountpoints:
            subprocess.run([REDIRFS, "umount", "--force", mountpoint], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.rmdir(mountpoint)
        os.unlink(token.name)
    after = limits.device_reads()
    later = [e["samples"] / e["seconds"] for e in epochs[1:]] or [e["samples"] / e["seconds"] for e in epochs]
    remote_opens = sum(s["cluster"]["remoteOpens"] for s in stats)
    row = {"loader": f"{nodes}-node pack-pool", "pipeline": "read", "nodes": nodes, "samplesPerSecond": statistics.median(later), "epochs": epochs,
           "deviceBytes": after[0] - before[0], "deviceOps": after[1] - before[1], "readAmplification": (after[0] - before[0]) / args.epochs / info["bytes"],
           "remoteShare": remote_opens / max(1, sum(s["cluster"]["remoteOpens"] + s["protocol"]["opens"] - s["protocol"]["remoteOpens"] for s in stats)),
           "requestsPerRemoteSample": sum(s["cluster"]["remoteRequests"] for s in stats) / max(1, remote_opens),
           "prefetchUsed": sum(s["cluster"]["prefetchUsed"] for s in stats), "daemonPeakRssBytes": max(rss), "daemonCpuSecondsPerEpoch": cpu / args.epochs,
           "samplesReceivedPerEpoch": sum(s["cluster"]["remoteSamplesReceived"] for s in stats) / args.epochs,
           "samplesPerRequest": sum(s["cluster"]["remoteSamplesReceived"] for s in stats) / max(1, sum(s["cluster"]["remoteRequests"] for s in stats)),
           "openWaitFraction": sum(s["protocol"]["waitedOpens"] for s in stats) / max(1, sum(s["protocol"]["opens"] for s in stats)),
           "cpu": cpu_window}
    # The RPC layer alone, moving samples of this dataset's mean size in calls as full as the cluster's were.
    row["rpcAlone"] = rpc_cost(info["bytes"] / info["files"], row["samplesPerRequest"])
    log(f"cluster {nodes} nodes {row['samplesPerSecond']:8.0f} samples/s  device {row['deviceBytes'] / 2**20:8.0f} MiB in {row['deviceOps']} ops, "
        f"{row['requestsPerRemoteSample']:.2f} requests per remote sample")
    return row


def measured_window(sampler, per_rank, kinds):
    """Where the CPU went over the measured epochs (all but the first, as samples/s), from the first rank's start of
    the first of them to the last rank's end: see bench/cpu.py."""
    measured = [epochs[1:] or epochs for epochs in per_rank]
    start = min(rank[0]["started"] for rank in measured)
    end = max(rank[-1]["ended"] for rank in measured)
    window = sampler.window(start, end, sum(e["samples"] for rank in measured for e in rank), kinds)
    window["timeline"] = sampler.timeline(start, end)
    window["epochEnds"] = [round(max(rank[i]["ended"] for rank in measured) - start, 2) for i in range(len(measured[0]))]
    return window


def rpc_cost(sample_bytes, per_call):
    """CPU per sample moved between two nodes by redirfs's RPC layer alone (bench/rpc-cost.js), each end its own process."""
    done = subprocess.run(["node", os.path.join(HERE, "rpc-cost.js"), "--sample-bytes", str(round(sample_bytes)), "--per-call", str(max(1, round(per_call)))],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- hot path

def read_all(paths, threads):
    def one(path):
        with open(path, "rb") as f:
            return len(f.read())
    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(one, paths, chunksize=64))
    return len(paths) / (time.time() - started), total


def hot_path(root, info, args):
    """Files/s with everything in memory: the page cache, the C ceiling server, and redirfs on each FUSE backend."""
    rel = sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "*", "*.jpg")))[: args.hot_files]
    raw_paths = [os.path.join(root, r) for r in rel]
    read_all(raw_paths, args.threads)  # warm the page cache
    raw = max(read_all(raw_paths, args.threads)[0] for _ in range(2))
    subset = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    subset.write("\n".join(rel))
    subset.close()
    try:
        # The ceiling is the C server at its best: libfuse's usual many threads, or one per core as redirfs runs.
        ceilings = [through_ceiling(root, rel, subset.name, args.threads, server_threads) for server_threads in sorted({16, os.cpu_count() or 1})]
        ceiling, ceiling_cpu, ceiling_split, ceiling_threads = max(ceilings, key=lambda c: c[0])
        mounts = {backend: through_redirfs(root, rel, subset.name, args.threads, backend) for backend in ("native", "fuse-native")}
    finally:
        os.unlink(subset.name)
    native = mounts["native"]
    return {"files": len(rel), "threads": args.threads, "rawFilesPerSecond": raw, "ceilingFilesPerSecond": ceiling, "ceilingCpuMicrosecondsPerFile": ceiling_cpu,
            "ceilingCpuByThread": ceiling_split, "ceilingThreads": ceiling_threads, "ceilingByThreads": {c[3]: round(c[0]) for c in ceilings},
            "mountFilesPerSecond": native["filesPerSecond"], "ratio": native["filesPerSecond"] / raw,
            "ratioToCeiling": native["filesPerSecond"] / ceiling, "backends": mounts, "daemonProfile": native["profile"]}


def through_ceiling(root, rel, listing, threads, server_threads):
    """Files/s through bench/ceiling/memfs.c (running `server_threads` FUSE threads), built here with the system's libfuse3, its CPU per file, and the thread count."""
    build = tempfile.mkdtemp(prefix="redirfs-memfs-")
    binary = os.path.join(build, "memfs")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], check=True, capture_output=True, text=True).stdout.split()
    subprocess.run(["gcc", "-O2", "-o", binary, os.path.join(HERE, "ceiling", "memfs.c"), *flags], check=True)
    mountpoint = tempfile.mkdtemp(prefix="redirfs-bench-ceiling-")
    server = subprocess.Popen([binary, mountpoint, root, listing, str(server_threads)], stdout=subprocess.PIPE, text=True)
    try:
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the ceiling server did not mount")
        paths = [os.path.join(mountpoint, r) for r in rel]
        read_all(paths, threads)
        cpu_before, threads_before = cpu_seconds(server.pid), thread_cpu(server.pid)
        rates = [read_all(paths, threads)[0] for _ in range(2)]
        split = cpu_by_thread_kind(server.pid, threads_before, thread_cpu(server.pid), 2 * len(rel))
        return max(rates), (cpu_seconds(server.pid) - cpu_before) / (2 * len(rel)) * 1e6, split, server_threads
    finally:
        subprocess.run(["umount", "-l", mountpoint], check=False)
        server.wait(timeout=30)
        os.rmdir(mountpoint)
        shutil.rmtree(build, ignore_errors=True)


def through_redirfs(root, rel, listing, threads, backend):
    """Files/s through a redirfs mount (strict, memory for everything), the daemon's CPU per file, and its JS profile."""
    prof_dir = tempfile.mkdtemp(prefix="redirfs-prof-")
    mountpoint = tempfile.mkdtemp(prefix="redirfs-bench-hot-")
    memory = 2 * sum(os.path.getsize(os.path.join(root, r)) for r in rel)
    # The CLI hands its node flags to the daemon it starts, so the daemon is profiled too.
    subprocess.run(["node", "--cpu-prof", f"--cpu-prof-dir={prof_dir}", REDIRFS, "mount", root, mountpoint, "--memory", str(memory),
                    "--include", listing, "--redirect", "strict", "--fuse-backend", backend, "--log-level", "warn"], check=True, stdout=subprocess.DEVNULL)
    try:
        with open(os.path.join(mountpoint, ".redirfs", "stats")) as f:
            pid = json.load(f)["pid"]
        paths = [os.path.join(mountpoint, r) for r in rel]
        read_all(paths, threads)
        cpu_before, threads_before, ops_before = cpu_seconds(pid), thread_cpu(pid), fuse_ops(mountpoint)
        rates = [read_all(paths, threads)[0] for _ in range(2)]
        cpu = cpu_seconds(pid) - cpu_before
        split = cpu_by_thread_kind(pid, threads_before, thread_cpu(pid), 2 * len(rel))
        ops_after = fuse_ops(mountpoint)
        ops = {op: (ops_after[op] - ops_before[op]) / (2 * len(rel)) for op in ops_after}
    finally:
        # A clean stop, so the daemon exits by itself and writes its profile.
        subprocess.run([REDIRFS, "umount", mountpoint], check=False)
        os.rmdir(mountpoint)
    time.sleep(1)
    profile = summarize_profile(prof_dir)
    shutil.rmtree(prof_dir, ignore_errors=True)
    return {"filesPerSecond": max(rates), "daemonCpuMicrosecondsPerFile": cpu / (2 * len(rel)) * 1e6, "cpuByThread": split,
            "fuseOpsPerFile": ops, "profile": profile}


def fuse_ops(mountpoint):
    """The FUSE requests a mount's daemon has answered so far, by kind (its stats; the native backend counts them)."""
    with open(os.path.join(mountpoint, ".redirfs", "stats")) as f:
        fs = json.load(f)["fs"]
    return {op: fs[op] for op in ("lookups", "getattrs", "opens", "reads") if op in fs}


def summarize_profile(prof_dir):
    """Self time per function of the daemon's CPU profile, top entries, as shares of its busy samples."""
    files = glob.glob(os.path.join(prof_dir, "*.cpuprofile"))
    if not files:
        return []
    profile = json.load(open(max(files, key=os.path.getsize)))
    by_id = {node["id"]: node for node in profile["nodes"]}
    counts = {}
    for sample in profile.get("samples", []):
        frame = by_id[sample]["callFrame"]
        if frame["functionName"] == "(idle)":
            continue  # waiting for FUSE requests: not time spent serving them
        where = f"{frame['functionName'] or '(anonymous)'} {os.path.basename(frame['url']) or ''}:{frame['lineNumber'] + 1}".strip()
        counts[where] = counts.get(where, 0) + 1
    total = sum(counts.values()) or 1
    return [{"function": k, "share": v / total} for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:12]]


# ---------------------------------------------------------------- report

def times(a, b):
    """'1.23x', or '-' when there is nothing to compare with."""
    return f"{a / b:.2f}x" if b else "-"


def write_report(result, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "latest.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = [f"Run {result['startedAt']} on commit {result.get('commit', 'unknown')}: `{result['command']}`", "",
             f"Dataset {result['dataset']['files']} JPEGs, {result['dataset']['bytes'] / 2**30:.2f} GiB, {result['dataset']['classes']} classes; "
             f"memory {result['memoryFraction']:.0%} of it ({result['memoryBytes'] / 2**20:.0f} MiB) plus what No-I/O's processes peaked at (+10%) and {DAEMON_ALLOWANCE // 2**20} MiB for the daemon "
             f"({', '.join(f'{p}: {a / 2**20:.0f} MiB' for p, a in result['allowanceBytes'].items())}) as the cgroup limit; "
             f"profile {result['profile']} ({result['iops'] or 'no'} IOPS, {result['bps'] / 10**6 if result['bps'] else 'no'} MB/s limit); "
             f"{result['epochs']} epochs, {result['workers']} workers, batch {result['batchSize']}, K={result['chunkSize']}"
             f"{', packs in the shared layout' if result.get('packLayout') == 'shared' else ''}.", ""]
    for pipeline in result["pipelines"]:
        rows = [r for r in result["rows"] if r["pipeline"] == pipeline and "infeasible" not in r]
        refused = [r for r in result["rows"] if r["pipeline"] == pipeline and "infeasible" in r]
        if not rows and not refused:
            continue
        base = next((r["samplesPerSecond"] for r in rows if r["loader"] == "pytorch"), 0)
        static = next((r["samplesPerSecond"] for r in rows if r["loader"] == "static"), 0)
        ffcv = next((r for r in rows if r["loader"] == "ffcv"), None)
        lines += [f"**{pipeline} pipeline** (samples/s: median of epochs 2..{result['epochs']})", "",
                  "| loader | samples/s | vs PyTorch | vs static cache |" + (" vs FFCV |" if ffcv else "") +
                  " device MiB/epoch | device ops/epoch | read amplification | opens waited | daemon peak RSS | daemon CPU s/epoch | daemon CPU µs/sample |",
                  "|---|---|---|---|" + ("---|" if ffcv else "") + "---|---|---|---|---|---|---|"]
        for r in rows:
            waited = f"{r['openWaitFraction']:.1%}" if "openWaitFraction" in r else "-"
            rss = f"{r['daemonPeakRssBytes'] / 2**20:.0f} MiB" if "daemonPeakRssBytes" in r else "-"
            cpu = f"{r['daemonCpuSecondsPerEpoch']:.1f}" if "daemonCpuSecondsPerEpoch" in r else "-"
            per_sample = f"{r['daemonCpuSecondsPerEpoch'] / result['dataset']['files'] * 1e6:.0f}" if "daemonCpuSecondsPerEpoch" in r else "-"
            versus_ffcv = f"{times(r['samplesPerSecond'], ffcv['samplesPerSecond'])} | " if ffcv else ""
            lines.append(f"| {r['loader']} | {r['samplesPerSecond']:.0f} | {times(r['samplesPerSecond'], base)} | {times(r['samplesPerSecond'], static)} | {versus_ffcv}"
                         f"{r['deviceBytes'] / result['epochs'] / 2**20:.0f} | {r['deviceOps'] / result['epochs']:.0f} | {r['readAmplification']:.2f} | {waited} | {rss} | {cpu} | {per_sample} |")
        lines += [f"| {r['loader']} | - (refused: {r['infeasible']}) |" for r in refused]
        lines += cpu_table(rows)
        if ffcv:
            lines += ["", f"FFCV reads its own copy of the dataset: a .beton of {ffcv['bytes'] / 2**30:.2f} GiB in {ffcv['pageBytes'] // 2**20} MiB pages, converted once "
                          f"before the run in {ffcv['seconds']:.0f} s (the dataset's JPEGs are {result['dataset']['bytes'] / 2**30:.2f} GiB), with its own Loader "
                          "(QUASI_RANDOM order, os_cache=False; bench/ffcv_loader.py) and training code written for it; "
                          "the other loaders read the ImageFolder with unchanged PyTorch code."]
        if result["bps"] and pipeline == "read":
            # No reader of this dataset can beat the profile's byte rate: bytes/s over the mean sample's bytes.
            bound = result["bps"] / (result["dataset"]["bytes"] / result["dataset"]["files"])
            best = max((r for r in rows if r["loader"] != "noio"), key=lambda r: r["samplesPerSecond"])
            lines += ["", f"The profile's {result['bps'] / 10**6:.0f} MB/s bounds any reader of this dataset at {bound:.0f} samples/s; "
                          f"the fastest loader here, {best['loader']}, reaches {best['samplesPerSecond'] / bound:.2f} of it."]
        lines.append("")
    if result.get("sweep"):
        lines += [f"**Chunk-size sweep** (pack, read pipeline, {result['sweepEpochs']} epochs)", "", "| K | mode | samples/s | chunk loads / PC / epoch | read amplification |", "|---|---|---|---|---|"]
        lines += [f"| {r['chunkSize']} | {r['loader']} | {r['samplesPerSecond']:.0f} | {r.get('chunkLoadsPerPcPerEpoch', 0):.2f} | {r['readAmplification']:.2f} |"
                  if "infeasible" not in r else f"| {r['chunkSize']} | {r['loader']} | - | - | - (refused: {r['infeasible']}) |" for r in result["sweep"]]
        lines.append("")
    if result.get("cluster"):
        one = next((r["samplesPerSecond"] for r in result["rows"] if r["loader"] == "pack-pool" and r["pipeline"] == "read" and "infeasible" not in r), 0)
        lines += ["**Cluster** (read pipeline, one pack on the shared throttled disk, pool; every node has the memory one node has above; "
                  "all nodes, trainers and daemons on this one machine and in one cgroup)", "",
                  "| setup | samples/s (all ranks) | vs 1 node | device MiB/epoch | read amplification | remote samples | requests per remote sample | opens waited | daemon peak RSS | daemons' CPU s/epoch |", "|---|---|---|---|---|---|---|---|---|---|"]
        single = next((r for r in result["rows"] if r["loader"] == "pack-pool" and r["pipeline"] == "read" and "infeasible" not in r), None)
        if single:
            lines.append(f"| 1 node (pack-pool above) | {one:.0f} | 1.00x | {single['deviceBytes'] / result['epochs'] / 2**20:.0f} | {single['readAmplification']:.2f} | 0% | - | "
                         f"{single['openWaitFraction']:.1%} | {single['daemonPeakRssBytes'] / 2**20:.0f} MiB | {single['daemonCpuSecondsPerEpoch']:.1f} |")
        for r in result["cluster"]:
            waited = f"{r['openWaitFraction']:.1%}" if "openWaitFraction" in r else "-"
            lines.append(f"| {r['nodes']} nodes | {r['samplesPerSecond']:.0f} | {times(r['samplesPerSecond'], one)} | {r['deviceBytes'] / result['epochs'] / 2**20:.0f} | "
                         f"{r['readAmplification']:.2f} | {r['remoteShare']:.0%} | {r['requestsPerRemoteSample']:.2f} | {waited} | {r['daemonPeakRssBytes'] / 2**20:.0f} MiB | {r.get('daemonCpuSecondsPerEpoch', 0):.1f} |")
        cpu_rows = [(f"{r['nodes']} nodes", r["cpu"]) for r in result["cluster"] if r.get("cpu")]
        if cpu_rows and single and single.get("cpu"):
            cores = single["cpu"]["cores"]
            lines += ["", f"Where the disk and the CPU went over the measured epochs (the disk's reads against the profile's {result['bps'] / 1e6:.0f} MB/s; "
                      f"µs of CPU per sample, of the machine's {cores} cores, which serve everything; the trainers' share is the machine's busy CPU "
                      "less the daemons', as the run holds nothing else):", "",
                      "| setup | disk busy | disk idle | cores busy | all processes | trainers | daemons: FUSE threads | main threads (JS) | other threads |", "|---|---|---|---|---|---|---|---|---|"]
            for label, c in [("1 node", single["cpu"])] + cpu_rows:
                d = c["daemonsMicrosecondsPerSample"]
                disk = f"{c['deviceBytesPerSecond'] / result['bps']:.0%}" if result["bps"] else f"{c['deviceBytesPerSecond'] / 1e6:.0f} MB/s"
                lines.append(f"| {label} | {disk} | {idle_seconds(c, result['bps'])} | {c['coresBusy']:.0%} | {c['machineMicrosecondsPerSample']:.0f} | {c['restMicrosecondsPerSample']:.0f} | "
                             f"{d['fuse']:.0f} | {d['main']:.0f} | {d['other']:.0f} |")
            lines += ["", "Disk idle: the half-seconds of the measured epochs in which the disk served under a tenth of the profile's bandwidth, "
                      "out of their length (the run's JSON keeps the timeline: the disk's MB/s and the cores' busy share every half-second)."]
        for r in result["cluster"]:
            rpc = r.get("rpcAlone")
            if not (rpc and single and r.get("samplesReceivedPerEpoch")):
                continue
            extra = (r["daemonCpuSecondsPerEpoch"] - single["daemonCpuSecondsPerEpoch"]) / r["samplesReceivedPerEpoch"] * 1e6
            alone = rpc["senderCpuMicrosecondsPerSample"] + rpc["receiverCpuMicrosecondsPerSample"]
            lines += ["", f"What a sample moved between nodes costs ({r['nodes']} nodes): the daemons together spent "
                      f"{r['daemonCpuSecondsPerEpoch'] - single['daemonCpuSecondsPerEpoch']:.1f} CPU-s per epoch more than one node's daemon, {extra:.0f} µs per sample "
                      f"received from a peer ({r['samplesReceivedPerEpoch']:.0f} per epoch, {r['samplesPerRequest']:.1f} per request). "
                      f"redirfs's RPC layer alone (`bench/rpc-cost.js`: its peer server and client, reads on the data channel and their pings on gRPC, two processes on loopback, {rpc['sampleBytes'] / 1000:.0f} KB samples, "
                      f"{rpc['samplesPerCall']} per call, nothing behind the server) costs {alone:.0f} µs per sample: {rpc['senderCpuMicrosecondsPerSample']:.0f} sending and "
                      f"{rpc['receiverCpuMicrosecondsPerSample']:.0f} receiving ({alone / extra:.0%} of the daemons' extra), and moved {rpc['megabytesPerSecond']:.0f} MB/s with {rpc['concurrency']} calls in flight."]
        lines.append("")
    if result.get("hotPath"):
        h = result["hotPath"]
        lines += [f"**Hot path**: {h['files']} files, {h['threads']} reader threads, everything in memory, strict:", "",
                  "| reader | files/s | of raw | of the C ceiling | server CPU µs/file | of which FUSE threads | main thread | other threads |", "|---|---|---|---|---|---|---|---|",
                  f"| raw page cache | {h['rawFilesPerSecond']:.0f} | 1.00 | - | - | - | - | - |",
                  f"| C ceiling (bench/ceiling/memfs.c, {h.get('ceilingThreads', 16)} threads) | {h['ceilingFilesPerSecond']:.0f} | {h['ceilingFilesPerSecond'] / h['rawFilesPerSecond']:.2f} | 1.00 | {h['ceilingCpuMicrosecondsPerFile']:.0f} | "
                  + split_cells(h.get("ceilingCpuByThread"))]
        for backend, b in h["backends"].items():
            lines.append(f"| redirfs, {backend} | {b['filesPerSecond']:.0f} | {b['filesPerSecond'] / h['rawFilesPerSecond']:.2f} | "
                         f"{b['filesPerSecond'] / h['ceilingFilesPerSecond']:.2f} | {b['daemonCpuMicrosecondsPerFile']:.0f} | " + split_cells(b.get("cpuByThread")))
        ops = h["backends"].get("native", {}).get("fuseOpsPerFile")
        if ops:
            lines += ["", "FUSE requests the native backend answered per file read (and one release each, not counted): "
                      + ", ".join(f"{name} {count:.2f}" for name, count in ops.items()) + ". CPU by thread: the FUSE threads answer the kernel; "
                      "the main thread is JS in redirfs (libfuse's idle loop in the C server); the others are the thread pool and V8's helpers."]
        if h.get("ceilingByThreads"):
            lines += ["", "The C ceiling is the best of its runs with libfuse's usual 16 FUSE threads and with one per core (redirfs's default): "
                      + ", ".join(f"{files:.0f} files/s with {n}" for n, files in h["ceilingByThreads"].items()) + "."]
        lines += ["", "Daemon JS profile on the native backend (share of busy samples, idle excluded):", "", "| function | share |", "|---|---|"]
        lines += [f"| `{p['function']}` | {p['share']:.1%} |" for p in h["daemonProfile"]]
        lines.append("")
    with open(os.path.join(out, "latest.md"), "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(out, "latest.svg"), "w") as f:
        f.write(svg_chart(result))
    return "\n".join(lines)


def cpu_table(rows):
    """Where each loader's CPU went over its measured epochs: how busy the cores were, and µs per sample of all
    processes, of the trainer (all but the daemon: the run holds nothing else), and of the daemon by kind of thread."""
    measured = [r for r in rows if r.get("cpu")]
    if not measured:
        return []
    lines = ["", f"Where the CPU went over the measured epochs (µs of CPU per sample, of the machine's {measured[0]['cpu']['cores']} cores; "
             "the trainer's share is the machine's busy CPU less the daemon's, as the run holds nothing else):", "",
             "| loader | cores busy | cores idle at an epoch's start | all processes | trainer | daemon: FUSE threads | main thread (JS) | other threads |",
             "|---|---|---|---|---|---|---|---|"]
    for r in measured:
        c = r["cpu"]
        daemon = split_cells(c["daemonsMicrosecondsPerSample"]) if any(c["daemonsMicrosecondsPerSample"].values()) else "- | - | - |"
        stall = epoch_start_stall(c)
        stall = f"{stall:.1f} s" if stall is not None else "-"
        lines.append(f"| {r['loader']} | {c['coresBusy']:.0%} | {stall} | {c['machineMicrosecondsPerSample']:.0f} | {c['restMicrosecondsPerSample']:.0f} | {daemon}")
    lines += ["", "Cores idle at an epoch's start: the seconds, on average over the measured epochs, from an epoch's start until the cores "
              "were first 80% busy again (in half-second steps of the run's timeline)."]
    return lines


def epoch_start_stall(cpu, busy=0.8):
    """Seconds from each measured epoch's start until the cores are first mostly busy again (mean over the epochs),
    from the half-second timeline: a loader that has its first samples ready keeps the decoders busy across the
    boundary; one that makes them wait for the disk leaves the cores idle meanwhile. None without a timeline."""
    timeline, ends = cpu.get("timeline"), cpu.get("epochEnds")
    if not timeline or not ends:
        return None
    step = timeline[1][0] - timeline[0][0] if len(timeline) > 1 else 0.5
    stalls = []
    for start in [0.0] + ends[:-1]:
        # The first step that ends after the epoch began and kept the cores busy.
        first = next((at for at, _, share in timeline if at + step > start and share >= busy), None)
        stalls.append(max(0.0, (first if first is not None else cpu["seconds"]) - start))
    return sum(stalls) / len(stalls)


def idle_seconds(cpu, bps):
    """How long the disk idled over a measured window, from its half-second timeline: "3.0 s of 14.0 s"."""
    timeline = cpu.get("timeline")
    if not timeline or not bps:
        return "-"
    step = timeline[1][0] - timeline[0][0] if len(timeline) > 1 else 0.5
    idle = sum(step for _, megabytes, _ in timeline if megabytes * 1e6 < bps / 10)
    return f"{idle:.1f} s of {cpu['seconds']:.1f} s"


def split_cells(split):
    """The CPU-by-thread cells of a hot-path row: FUSE threads, main thread, other threads (µs/file)."""
    if not split:
        return "- | - | - |"
    return f"{split['fuse']:.0f} | {split['main']:.0f} | {split['other']:.0f} |"


def svg_chart(result):
    """Horizontal bars of samples/s per loader, one panel per pipeline."""
    panels = [(p, [r for r in result["rows"] if r["pipeline"] == p and "infeasible" not in r]) for p in result["pipelines"]]
    bar, gap, left, width = 18, 6, 110, 420
    height = sum(40 + len(rows) * (bar + gap) for _, rows in panels) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" height="{height}" font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>']
    y = 10
    for pipeline, rows in panels:
        top = max([r["samplesPerSecond"] for r in rows] + [1])
        out.append(f'<text x="4" y="{y + 14}" font-weight="bold">{pipeline} pipeline: samples/s ({result["profile"]}, memory {result["memoryFraction"]:.0%})</text>')
        y += 26
        for r in rows:
            w = width * r["samplesPerSecond"] / top
            color = "#2b6cb0" if r["loader"] in ("strict", "pool", "off") or r["loader"].startswith("pack-") else "#a0aec0"
            out.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{r["loader"]}</text>')
            out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar}" fill="{color}"/>')
            out.append(f'<text x="{left + w + 4:.1f}" y="{y + 13}">{r["samplesPerSecond"]:.0f}</text>')
            y += bar + gap
        y += 14
    out.append("</svg>")
    return "\n".join(out)


# ---------------------------------------------------------------- main

def main():
    # The object-storage profile is a benchmark of its own (bench/objects.py): loaders that read a bucket.
    if "--profile" in sys.argv and sys.argv[sys.argv.index("--profile") + 1:][:1] == ["s3"]:
        import objects
        return objects.main(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=size_arg, default=size_arg("2G"), help="dataset size (default 2G)")
    parser.add_argument("--classes", type=int, default=16, help="classes (default 16: ~1300 files each at 2G, as ImageNet)")
    parser.add_argument("--data", default=os.path.join(HERE, "data"), help="where datasets and packs are kept between runs")
    parser.add_argument("--memory-fraction", type=float, default=0.25, help="memory for data, as a fraction of the dataset (default 0.25)")
    parser.add_argument("--profile", choices=sorted(PROFILES) + ["custom", "s3"], default="nas", help="s3: the object-storage benchmark (bench/objects.py)")
    parser.add_argument("--iops", type=int, default=0, help="custom profile: read IOPS limit")
    parser.add_argument("--bps", type=int, default=0, help="custom profile: read bytes/s limit")
    parser.add_argument("--loaders", default=",".join(ALL_LOADERS))
    parser.add_argument("--pipelines", default="read,full")
    parser.add_argument("--full-loaders", default="", help="loaders for the full pipeline (default: the same as --loaders)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--pack-layout", choices=["class", "shared"], default="class",
                        help="how the pack-* loaders' pack is cut (redirfs pack --layout): shared for many classes on little memory")
    parser.add_argument("--sweep", default="", help="chunk sizes to sweep over a pack, e.g. 1,4,16,64,256")
    parser.add_argument("--sweep-epochs", type=int, default=2)
    parser.add_argument("--hot-path", action="store_true", help="also measure files/s through the mount versus the page cache and a minimal C FUSE server")
    parser.add_argument("--hot-path-only", action="store_true", help="measure only the hot path (no cgroups, no loaders); use with --out")
    parser.add_argument("--hot-files", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--cluster", type=int, default=0, help="also run N redirfs nodes on loopback with N DistributedSampler trainers (pack-pool), e.g. 3")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: run as root (cgroups, drop_caches, FUSE)")

    os.makedirs(args.data, exist_ok=True)
    root, info = ensure_dataset(args.data, args.size, args.classes, args.seed)
    loaders = [name for name in args.loaders.split(",") if name]
    full_loaders = [name for name in args.full_loaders.split(",") if name] or loaders
    # What each pipeline runs: FFCV only where there is decoding.
    runs = {pipeline: [n for n in (full_loaders if pipeline == "full" else loaders) if pipeline == "full" or n not in FULL_ONLY]
            for pipeline in args.pipelines.split(",")}
    unknown = (set(loaders) | set(full_loaders)) - set(ALL_LOADERS)
    if unknown:
        sys.exit(f"bench: unknown loaders {', '.join(sorted(unknown))}; known: {', '.join(ALL_LOADERS)}")
    running = {name for names in runs.values() for name in names}
    sources = {"dir": root}
    if any(name.startswith("pack-") for name in running) or args.cluster > 1:
        sources["pack"] = ensure_pack(args.data, root, args.chunk_size, info, args.pack_layout)
    if "ffcv" in running:
        sources["beton"] = ensure_beton(args.data, root, info)
    sweep = [int(k) for k in args.sweep.split(",") if k]
    packs = {k: ensure_pack(args.data, root, k, info) for k in sweep}
    iops, bps = PROFILES.get(args.profile, (args.iops, args.bps))
    memory = int(info["bytes"] * args.memory_fraction)
    # redirfs's own environment settings (REDIRFS_FUSE_THREADS, ...) change what runs: part of the command.
    settings = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("REDIRFS_"))
    result = {"startedAt": datetime.datetime.now().isoformat(timespec="seconds"), "command": (settings + " " if settings else "") + "npm run bench -- " + " ".join(sys.argv[1:]),
              "commit": code_version(),
              "dataset": info, "memoryFraction": args.memory_fraction, "memoryBytes": memory, "allowanceBytes": {},
              "profile": args.profile, "iops": iops, "bps": bps, "epochs": args.epochs, "workers": args.workers,
              "batchSize": args.batch_size, "chunkSize": args.chunk_size, "packLayout": args.pack_layout, "pipelines": args.pipelines.split(","), "rows": [], "sweep": [], "sweepEpochs": args.sweep_epochs,
              "cluster": []}

    if args.hot_path_only:
        result["hotPath"] = hot_path(root, info, args)
        print(write_report(result, args.out))
        return
    try:
        limits = cgroups.detect(CGROUP, iops, bps, device_of(root))
    except cgroups.CgroupUnavailable as why:
        sys.exit(str(why))
    log(f"limits in cgroup v{limits.version}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        for pipeline in result["pipelines"]:
            # Calibrate: what the trainer's processes need with no data at all (No-I/O, unlimited).
            # Every loader then gets that, plus the daemon's allowance, plus the data share; the
            # baseline's page cache gets whatever of it redirfs would spend on its daemon.
            limits.set_memory_limit(-1)
            limits.reset_peak_memory()
            noio = measure("noio", pipeline, args, info, sources, limits, memory)
            allowance = int(limits.peak_memory() * 1.1) + DAEMON_ALLOWANCE
            result["allowanceBytes"][pipeline] = allowance
            limits.set_memory_limit(allowance + memory)
            log(f"{pipeline}: cgroup memory limit {(allowance + memory) / 2**20:.0f} MiB ({allowance / 2**20:.0f} MiB for processes)")
            for name in runs[pipeline]:
                try:
                    row = noio if name == "noio" else measure(name, pipeline, args, info, sources, limits, memory)
                except Infeasible as why:
                    log(f"{pipeline} {name}: refused: {why}")
                    row = {"loader": name, "pipeline": pipeline, "infeasible": str(why)}
                result["rows"].append(row)
                write_report(result, args.out)
        if args.cluster > 1:
            result["cluster"].append(measure_cluster(args.cluster, args, info, sources["pack"], limits, memory, result["allowanceBytes"].get("read", DAEMON_ALLOWANCE)))
            write_report(result, args.out)
        sweep_args = argparse.Namespace(**{**vars(args), "epochs": args.sweep_epochs})
        for k in sweep:
            for mode in ("strict", "pool"):
                try:
                    row = measure(f"pack-{mode}", "read", sweep_args, info, {"dir": root, "pack": packs[k]}, limits, memory)
                except Infeasible as why:
                    log(f"K={k} {mode}: {why}")
                    row = {"loader": f"pack-{mode}", "infeasible": str(why)}
                row["chunkSize"] = k
                result["sweep"].append(row)
                write_report(result, args.out)
    finally:
        limits.close()
    if args.hot_path:
        result["hotPath"] = hot_path(root, info, args)
    print(write_report(result, args.out))


if __name__ == "__main__":
    main()
