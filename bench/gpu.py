"""A real GPU trainer reading through a redirfs mount, against plain PyTorch reading the same directory.

  python3 bench/gpu.py [options]            (on the GPU machine: bash bench/device.sh [options])

One run:
- makes (once, kept in --data) an ImageFolder of real JPEGs, ~110 KB and ~470x380 like ImageNet's,
  in parallel; every file carries its class and a unique id in a JPEG comment (COM), so each batch
  can be checked: the label ImageFolder gave (from the path opened) must be the class the bytes were
  made for, and each epoch must deliver every id exactly once;
- trains torchvision's resnet50 (bf16 autocast, channels_last, SGD) with an unmodified ImageFolder +
  DataLoader (--workers, pin_memory, persistent workers; torchvision's default loader opening each
  file; RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize) for --epochs, with:
    pytorch    ImageFolder on the raw directory
    redirfs    ImageFolder on a redirfs mount of it (default mode, --memory-fraction of the dataset)
    synthetic  random batches already on the GPU: the model's own img/s, the ceiling;
- in two storage conditions: warm (the dataset read into the page cache first) and cold
  (drop_caches before every epoch, for both loaders);
- prints per-epoch img/s, the correctness check, redirfs' stats after each of its jobs, the
  redirfs/pytorch ratio per condition, and writes results.json and results.md into --out.

Every job runs as a child process (its own CUDA context and DataLoader workers). --budget bounds
the whole run: each job is given a share of what is left, stops after the epoch that uses its
share, and is stopped mid-epoch at its hard limit; what was measured is always written.
"""
import argparse
import concurrent.futures
import io
import json
import multiprocessing
import os
import platform
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time

from cpu import cpu_seconds
from harness import class_counts, peak_rss
from harness import code_version as checkout_version

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TAG = b"rfsgpu:"
GENERATOR = 1  # raise when the images change: a kept dataset is then made again


def log(message):
    print(f"[gpu {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024


# ---------------------------------------------------------------- dataset

def jpeg_with_comment(data, comment):
    """JPEG bytes with a COM segment after SOI (and after APP0/JFIF, which should come first)."""
    assert data[:2] == b"\xff\xd8"
    at = 2
    if data[2:4] == b"\xff\xe0":
        at = 4 + struct.unpack(">H", data[4:6])[0]
    return data[:at] + b"\xff\xfe" + struct.pack(">H", len(comment) + 2) + comment + data[at:]


def make_image(rng, comment, quality):
    """A photographic-ish picture: smooth light, coarse and fine structure, sensor noise."""
    import numpy as np
    from PIL import Image
    RESAMPLE = getattr(Image, "Resampling", Image)  # Pillow >= 9.1 names them there
    w, h = int(rng.integers(380, 561)), int(rng.integers(300, 461))
    low = rng.integers(0, 256, size=(int(rng.integers(3, 8)), int(rng.integers(3, 8)), 3), dtype=np.uint8)
    img = np.asarray(Image.fromarray(low).resize((w, h), RESAMPLE.BICUBIC)).astype(np.float32)
    for step, amount in ((16, 0.35), (4, 0.45)):
        detail = rng.integers(0, 256, size=(h // step + 1, w // step + 1, 3), dtype=np.uint8)
        img += (np.asarray(Image.fromarray(detail).resize((w, h), RESAMPLE.BILINEAR)).astype(np.float32) - 128) * amount
    img += rng.normal(0, 18, size=(h, w, 1)).astype(np.float32)
    img += rng.normal(0, 6, size=(h, w, 3)).astype(np.float32)
    out = io.BytesIO()
    Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(out, "JPEG", quality=quality)
    return jpeg_with_comment(out.getvalue(), comment)


def make_files(task):
    import numpy as np
    root, name, first_id, start, count, seed, quality = task
    total = 0
    for i in range(start, start + count):
        rng = np.random.default_rng([seed, first_id + i])
        data = make_image(rng, TAG + f"{name}:{first_id + i}".encode(), quality)
        with open(os.path.join(root, name, f"img{i:06d}.jpg"), "wb") as f:
            f.write(data)
        total += len(data)
    return count, total


def ensure_dataset(args):
    wanted = {"generator": GENERATOR, "classes": args.classes, "files": args.files, "seed": args.seed, "quality": args.quality}
    root = os.path.join(args.data, f"imagefolder-{args.classes}c-{args.files}f-s{args.seed}")
    marker = os.path.join(root, ".complete.json")
    if os.path.exists(marker):
        with open(marker) as f:
            info = json.load(f)
        if {k: info.get(k) for k in wanted} == wanted:
            log(f"dataset {root}: {info['files']} files, {human(info['bytes'])} (kept from an earlier run)")
            return root, info
    shutil.rmtree(root, ignore_errors=True)
    partial = root + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    counts = class_counts(args.files, args.classes)
    tasks, first = [], 0
    for c, n in enumerate(counts):
        name = f"class{c:03d}"
        os.makedirs(os.path.join(partial, name))
        for start in range(0, n, 50):
            tasks.append((partial, name, first, start, min(50, n - start), args.seed, args.quality))
        first += n
    procs = args.gen_workers or os.cpu_count()
    log(f"generating {sum(counts)} JPEGs in {args.classes} classes into {root} with {procs} processes")
    started = time.time()
    files = total = 0
    # A process pool that fails (BrokenProcessPool) if a worker dies, rather than waiting for it forever.
    with concurrent.futures.ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("fork")) as pool:
        try:
            for n, b in pool.map(make_files, tasks):
                files, total = files + n, total + b
        except BaseException:
            # Stopped (a signal, a worker that died): leaving the block would wait for every queued task.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    os.rename(partial, root)
    info = {**wanted, "files": files, "bytes": total, "counts": counts, "seconds": round(time.time() - started, 1)}
    with open(marker, "w") as f:
        json.dump(info, f)
    log(f"generated {files} files, {human(total)} (mean {total / files / 1024:.0f} KiB) in {info['seconds']} s")
    return root, info


def read_all(root, threads=16):
    """Read every file once (page cache warm)."""
    paths = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]

    def read(p):
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(read, paths))


# ---------------------------------------------------------------- machine

def disk_read_bytes():
    """Bytes read from whole block devices (virtio, SCSI/SATA, NVMe, Xen) since boot."""
    total = 0
    for dev in os.listdir("/sys/block"):
        if dev.startswith(("vd", "sd", "nvme", "xvd", "hd")):
            try:
                with open(f"/sys/block/{dev}/stat") as f:
                    total += int(f.read().split()[2]) * 512
            except (OSError, IndexError, ValueError):
                pass
    return total


def drop_caches():
    """The page cache, as harness.drop_caches drops it; not that one itself, which then reads the code back
    with Debian's python3 and node, and the GPU machine has neither."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1")


def fs_type(path):
    best, kind = "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            mnt = parts[1].replace("\\040", " ")
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, parts[2]
    return kind


def proc_cpu_seconds(pid):
    """cpu.cpu_seconds, or None once the process is gone."""
    try:
        return cpu_seconds(pid)
    except (OSError, IndexError, ValueError):
        return None


def proc_peak_rss(pid):
    """harness.peak_rss, or None once the process is gone."""
    try:
        return peak_rss(pid)
    except OSError:
        return None


# ---------------------------------------------------------------- the job (a child process)

def build_model(args, classes):
    import torch
    import torchvision
    if args.model == "tiny":
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 7, stride=4, padding=3), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, classes))
    else:
        model = getattr(torchvision.models, args.model)(weights=None, num_classes=classes)
    return model


class Trainer:
    def __init__(self, args, classes):
        import torch
        self.torch = torch
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            torch.backends.cudnn.benchmark = True
        self.model = build_model(args, classes).to(self.device, memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-5)
        self.loss = torch.nn.CrossEntropyLoss()
        self.amp = args.amp == "bf16"
        self.batch = args.batch_size

    def step(self, x, y):
        torch = self.torch
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            loss = self.loss(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def warm_up(self, steps):
        """cuDNN autotuning and allocator growth, outside every timed epoch."""
        torch = self.torch
        x = torch.randn(self.batch, 3, 224, 224, device=self.device).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, self.model_classes(), (self.batch,), device=self.device)
        for _ in range(steps):
            self.step(x, y)
        self.sync()
        return x, y

    def name(self):
        return self.torch.cuda.get_device_name(self.device) if self.cuda else platform.processor() or "cpu"

    def model_classes(self):
        last = [m for m in self.model.modules() if isinstance(m, self.torch.nn.Linear)][-1]
        return last.out_features


def emit(record):
    print(json.dumps(record), flush=True)


def job_synthetic(args, classes):
    trainer = Trainer(args, classes)
    started = time.time()
    x, y = trainer.warm_up(args.warmup_steps)
    warm_s = time.time() - started
    steps, t0 = 0, time.time()
    until = min(t0 + args.synthetic_seconds, args.hard_deadline)
    while True:
        for _ in range(5):
            loss = trainer.step(x, y)
        steps += 5
        trainer.sync()
        if time.time() >= until:
            break
    seconds = time.time() - t0
    emit({"type": "synthetic", "gpu": trainer.name(), "samples": steps * args.batch_size, "seconds": seconds, "imgPerSec": steps * args.batch_size / seconds,
          "steps": steps, "warmupSeconds": warm_s, "loss": float(loss.detach())})


def job_loader(args, classes):
    import numpy as np
    import torch
    from torchvision import datasets, transforms

    class Tagged(datasets.ImageFolder):
        """ImageFolder with torchvision's default loader, unchanged; also returns the class and id the
        bytes were made with (the JPEG comment), read from the image the loader opened."""

        def __getitem__(self, index):
            path, target = self.samples[index]
            img = self.loader(path)
            tag = img.info.get("comment", b"")
            cls, sid = -1, -1
            if isinstance(tag, bytes) and tag.startswith(TAG):
                name, _, number = tag[len(TAG):].decode().rpartition(":")
                cls, sid = self.class_to_idx.get(name, -2), int(number)
            return self.transform(img), target, cls, sid

    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    pipeline = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor(), normalize])
    t0 = time.time()
    dataset = Tagged(args.root, transform=pipeline)
    scan_s = time.time() - t0
    # Every id the dataset was made with, not what the mount lists: a file it hid would otherwise go unmissed.
    n = args.samples_expected
    listed = len(dataset)
    trainer = Trainer(args, len(dataset.classes))
    cuda = trainer.cuda
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                         pin_memory=cuda, persistent_workers=args.workers > 0, drop_last=False,
                                         timeout=args.loader_timeout if args.workers > 0 else 0,
                                         generator=torch.Generator().manual_seed(args.seed))
    trainer.warm_up(args.warmup_steps)
    setup_s = time.time() - t0
    emit({"type": "setup", "gpu": trainer.name(), "samples": n, "classes": len(dataset.classes), "scanSeconds": scan_s, "setupSeconds": setup_s})
    last_epoch_s = None
    for epoch in range(args.epochs):
        now = time.time()
        if epoch > 0 and last_epoch_s is not None and now + last_epoch_s > args.soft_deadline:
            log(f"{args.job_name}: stopping after {epoch} epochs: the next would pass this job's share of the budget")
            break
        if now >= args.hard_deadline:
            break
        dropped = None
        if args.condition == "cold":
            t = time.time()
            drop_caches()
            dropped = time.time() - t
        disk0 = disk_read_bytes()
        ids, mismatched, untagged, samples, wait, partial = [], 0, 0, 0, 0.0, False
        started = time.time()
        it = iter(loader)
        while True:
            t = time.time()
            try:
                x, y, tag_cls, sid = next(it)
            except StopIteration:
                break
            wait += time.time() - t
            mismatched += int((tag_cls != y).sum())
            untagged += int((sid < 0).sum())
            ids.append(sid.numpy())
            samples += len(y)
            loss = trainer.step(x.to(trainer.device, non_blocking=True).contiguous(memory_format=torch.channels_last),
                                y.to(trainer.device, non_blocking=True))
            if time.time() >= args.hard_deadline:
                partial = True
                break
        trainer.sync()
        seconds = time.time() - started
        disk = disk_read_bytes() - disk0
        ids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
        counts = np.bincount(ids[ids >= 0], minlength=n) if len(ids) else np.zeros(n, dtype=np.int64)
        missing = int((counts == 0).sum()) if not partial else None
        duplicates = int((counts[counts > 1] - 1).sum())
        out_of_range = int((ids >= n).sum())
        exact = (not partial) and listed == n and samples == n and missing == 0 and duplicates == 0 and mismatched == 0 and untagged == 0 and out_of_range == 0
        record = {"type": "epoch", "epoch": epoch, "samples": samples, "seconds": seconds, "imgPerSec": samples / seconds if seconds else 0,
                  "listed": listed, "loaderWaitSeconds": wait, "diskReadBytes": disk, "dropCachesSeconds": dropped, "partial": partial,
                  "labelMismatches": mismatched, "untagged": untagged, "missing": missing, "duplicates": duplicates,
                  "outOfRange": out_of_range, "exact": exact, "loss": float(loss.detach()) if samples else None}
        emit(record)
        if not exact and not partial:
            log(f"!!! CORRECTNESS FAILURE in {args.job_name} epoch {epoch}: {samples}/{n} samples ({listed} listed), {mismatched} wrong labels, "
                f"{missing} missing, {duplicates} duplicates, {untagged} untagged, {out_of_range} unknown ids")
        if partial:
            log(f"{args.job_name}: epoch {epoch} stopped at the hard time limit ({samples} of {n} samples)")
            break
        last_epoch_s = seconds
    del loader  # persistent workers end here, before the orchestrator unmounts


def run_job(args):
    classes = args.classes_seen
    if args.job_name == "synthetic":
        job_synthetic(args, classes)
    else:
        job_loader(args, classes)


# ---------------------------------------------------------------- the orchestrator

class Stop(Exception):
    pass


def on_signal(signum, frame):
    raise Stop(f"signal {signum}")


class Mount:
    def __init__(self, args, source, mountpoint, memory, log_file):
        self.args, self.mountpoint, self.pid, self.log_file = args, mountpoint, None, log_file
        self.job, self.cpu0 = {"name": "?"}, None
        os.makedirs(mountpoint, exist_ok=True)
        command = [args.redirfs, "mount", source, mountpoint, "--memory", str(memory), "--log-level", args.log_level,
                   "--log-file", log_file, *args.redirfs_args.split()]
        log("$ " + " ".join(command))
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.mount_timeout)
        except subprocess.TimeoutExpired:
            # Its daemon may be up and mounted by now: take it down before saying so.
            self.close()
            raise RuntimeError(f"redirfs mount did not answer in {args.mount_timeout} s")
        self.output = (done.stdout + done.stderr).strip()
        log(f"redirfs mount (exit {done.returncode}): {self.output}")
        if done.returncode != 0:
            raise RuntimeError(f"redirfs mount failed: {self.output}")
        stats = self.stats_json()
        self.pid = stats.get("pid") if stats else None
        if self.pid:
            with open(os.path.join(args.work, "daemon.pids"), "a") as f:
                f.write(f"{self.pid}\n")

    def stats_json(self):
        try:
            done = subprocess.run([self.args.redirfs, "stats", "--json", self.mountpoint], capture_output=True, text=True, timeout=30)
            return json.loads(done.stdout) if done.returncode == 0 else None
        except (subprocess.TimeoutExpired, ValueError) as err:
            log(f"redirfs stats --json: {err}")
            return None

    def stats_text(self):
        try:
            done = subprocess.run([self.args.redirfs, "stats", self.mountpoint], capture_output=True, text=True, timeout=30)
            return (done.stdout + done.stderr).strip()
        except subprocess.TimeoutExpired:
            return "redirfs stats timed out"

    def record(self, name):
        """The daemon's stats, CPU and peak memory into the job's record."""
        job = self.job
        stats = self.stats_json()
        job["redirfsStats"] = self.stats_text()
        log(f"redirfs stats after {name}:\n{job['redirfsStats']}")
        if stats:
            p = stats["protocol"]
            runs = stats.get("runs", {})
            job["redirfsCounters"] = {"protocol": p, "runs": runs, "source": stats.get("source"), "memory": stats.get("memory"), "layout": stats.get("layout")}
            job["redirfsSummary"] = (f"{p['opens']} opens, {p['memoryHits']} from memory, {p['redirects']} redirects, "
                                     f"{p['waitedOpens']} waited, {p['failedOpens']} failed; runs {runs.get('runs')}"
                                     f"{'' if runs.get('exact', True) else ' NOT EXACT'}")
            if not runs.get("exact", True):
                log(f"!!! redirfs says NOT EXACT after {name}")
        if self.pid:
            cpu1 = proc_cpu_seconds(self.pid)
            job["daemonCpuSeconds"] = cpu1 - self.cpu0 if cpu1 is not None and self.cpu0 is not None else None
            job["daemonPeakRssBytes"] = proc_peak_rss(self.pid)

    def close(self):
        def attempt(command, timeout=60):
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
                if done.returncode != 0:
                    log(f"{' '.join(command)}: exit {done.returncode}: {(done.stdout + done.stderr).strip()}")
                return done.returncode == 0
            except (subprocess.TimeoutExpired, OSError) as err:
                log(f"{' '.join(command)}: {err}")
                return False
        if not attempt([self.args.redirfs, "umount", self.mountpoint]) and not attempt([self.args.redirfs, "umount", "--force", self.mountpoint]):
            if self.pid:
                try:
                    os.kill(self.pid, signal.SIGTERM)  # the daemon unmounts as it stops
                except ProcessLookupError:
                    pass
            if not attempt(["fusermount3", "-uz", self.mountpoint], 20):
                attempt(["umount", "-l", self.mountpoint], 20)
        if self.pid:
            for _ in range(50):
                if not os.path.exists(f"/proc/{self.pid}"):
                    break
                time.sleep(0.1)
            else:
                log(f"daemon {self.pid} still running after unmount: killing it")
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            os.rmdir(self.mountpoint)
        except OSError:
            pass


def unmount_leftovers(work):
    """Any FUSE mount still under --work (a mount interrupted between its start and its stats): lazily unmounted, so
    no run leaves one behind."""
    with open("/proc/mounts") as f:
        mounts = [line.split()[1].replace("\\040", " ") for line in f if line.split()[2].startswith("fuse")]
    for mountpoint in mounts:
        if mountpoint.startswith(work.rstrip("/") + "/"):
            log(f"{mountpoint} is still mounted: unmounting it")
            if subprocess.run(["fusermount3", "-uz", mountpoint], capture_output=True, check=False).returncode != 0:
                subprocess.run(["umount", "-l", mountpoint], capture_output=True, check=False)


def child_command(args, name, condition, root, classes, samples, soft, hard):
    passthrough = ["--device", args.device, "--model", args.model, "--amp", args.amp, "--batch-size", str(args.batch_size),
                   "--workers", str(args.workers), "--epochs", str(args.epochs), "--seed", str(args.seed), "--lr", str(args.lr),
                   "--warmup-steps", str(args.warmup_steps), "--synthetic-seconds", str(args.synthetic_seconds),
                   "--loader-timeout", str(args.loader_timeout)]
    return [sys.executable, os.path.abspath(__file__), *passthrough, "--job-name", name, "--condition", condition, "--root", root,
            "--classes-seen", str(classes), "--samples-expected", str(samples), "--soft-deadline", str(soft), "--hard-deadline", str(hard)]


def run_child(args, command, kill_at, job, env=None):
    """Runs a job; returns (records, exit code or why it was stopped). Its stderr goes to ours. The
    records also go into job["records"] and its epochs into job["epochs"] as they come, so a run
    stopped midway keeps them."""
    records = job.setdefault("records", [])
    job.setdefault("epochs", [])
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True, env=env)
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buffer, status = "", None
    try:
        while True:
            left = kill_at - time.time()
            if left <= 0:
                status = "killed at its time limit"
                break
            if sel.select(timeout=min(left, 1.0)):
                chunk = os.read(proc.stdout.fileno(), 65536).decode(errors="replace")
                if not chunk:
                    break
                buffer += chunk
                while "\n" in buffer:
                    line, buffer = buffer.split("\n", 1)
                    if line.startswith("{"):
                        record = json.loads(line)
                        records.append(record)
                        if record.get("type") == "setup":
                            job["setup"] = record
                        if record.get("type") == "epoch":
                            job["epochs"].append(record)
                            log(f"  epoch {record['epoch']}: {record['samples']} samples in {record['seconds']:.1f} s = {record['imgPerSec']:.0f} img/s, "
                                f"loader wait {record['loaderWaitSeconds']:.1f} s, disk {human(record['diskReadBytes'])}, "
                                f"{'exact' if record['exact'] else 'partial' if record['partial'] else 'NOT EXACT'}")
                    elif line.strip():
                        log(f"  | {line}")
        if status is None:
            try:
                status = proc.wait(timeout=max(1.0, kill_at - time.time()))
            except subprocess.TimeoutExpired:
                status = "killed at its time limit"
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            status = status if status is not None else "killed"
        # Its DataLoader workers are in its session: none may outlive it (they would hold the mount).
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return records, status


def steady(epochs):
    """img/s of the epochs after the first (worker start-up), or of all when there is one; the median."""
    full = [e for e in epochs if not e["partial"]]
    later = full[1:] or full
    return statistics.median(e["imgPerSec"] for e in later) if later else None


def overall(epochs):
    """img/s over every full epoch together (the first included)."""
    full = [e for e in epochs if not e["partial"]]
    seconds = sum(e["seconds"] for e in full)
    return sum(e["samples"] for e in full) / seconds if seconds else None


def summarise(results):
    rows = []
    synthetic = results.get("synthetic", {}).get("imgPerSec")
    for job in results["jobs"]:
        epochs = job.get("epochs", [])
        s = steady(epochs)
        rows.append({"job": job["name"], "condition": job.get("condition", "-"), "loader": job.get("loader", job["name"]),
                     "epochs": len([e for e in epochs if not e["partial"]]), "steady": s, "overall": overall(epochs),
                     "ofSynthetic": s / synthetic if s and synthetic else None,
                     "exact": all(e["exact"] for e in epochs if not e["partial"]) and bool(epochs), "status": job.get("status")})
    ratios, ratios_all = {}, {}
    for condition in ("warm", "cold"):
        for key, into in (("steady", ratios), ("overall", ratios_all)):
            by = {r["loader"]: r[key] for r in rows if r["condition"] == condition}
            if by.get("redirfs") and by.get("pytorch"):
                into[condition] = by["redirfs"] / by["pytorch"]
    results["summary"] = {"rows": rows, "ratioRedirfsOverPytorch": ratios, "ratioAllEpochs": ratios_all, "synthetic": synthetic}


def code_version():
    """The commit of the redirfs that ran: the bundle's when bench/device.sh says (the device's copy of .git
    may be older than the tree it was sent with), else this checkout's, marked when it has changes."""
    return os.environ.get("REDIRFS_BENCH_COMMIT") or checkout_version()


def markdown(results):
    machine = results["machine"]
    command = os.environ.get("REDIRFS_BENCH_COMMAND") or "python3 bench/gpu.py " + " ".join(sys.argv[1:])
    lines = [f"# redirfs vs PyTorch on {machine.get('gpu', machine.get('device', '?'))}", "",
             f"Run on commit {code_version()}: `{command}`", "",
             f"{results['dataset']['files']} JPEGs in {results['dataset']['classes']} classes, {human(results['dataset']['bytes'])} "
             f"(mean {results['dataset']['bytes'] / results['dataset']['files'] / 1024:.0f} KiB) on {machine.get('dataFs')}; "
             f"{results['args']['model']} bs {results['args']['batch_size']} {results['args']['amp']}, {results['args']['workers']} workers, "
             f"{machine.get('cpus')} CPUs; redirfs --memory {human(results.get('redirfsMemory', 0))} {results['args']['redirfs_args']}", ""]
    syn = results["summary"]["synthetic"]
    lines.append(f"Synthetic (model only, data on GPU): {syn:.0f} img/s" if syn else "Synthetic: not measured")
    lines += ["", "| condition | loader | img/s per epoch | steady img/s | all epochs img/s | of synthetic | loader wait % | disk MiB/epoch | exact | redirfs |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for job in results["jobs"]:
        if job["name"] == "synthetic":
            continue
        epochs = job.get("epochs", [])
        s = steady(epochs)
        per = ", ".join(f"{e['imgPerSec']:.0f}" + ("*" if e["partial"] else "") for e in epochs) or "-"
        disk = ", ".join(f"{e['diskReadBytes'] / 2**20:.0f}" for e in epochs) or "-"
        exact = "yes" if epochs and all(e["exact"] for e in epochs if not e["partial"]) else ("**NO**" if epochs else "-")
        rfs = job.get("redirfsSummary", "")
        a = overall(epochs)
        wait = ", ".join(f"{e['loaderWaitSeconds'] / e['seconds']:.0%}" for e in epochs if e["seconds"]) or "-"
        lines.append(f"| {job['condition']} | {job['loader']} | {per} | {f'{s:.0f}' if s else '-'} | {f'{a:.0f}' if a else '-'} | "
                     f"{f'{s / syn:.0%}' if s and syn else '-'} | {wait} | {disk} | {exact} | {rfs} |")
    lines.append("")
    for condition, ratio in results["summary"]["ratioRedirfsOverPytorch"].items():
        lines.append(f"- {condition}: redirfs / pytorch = **{ratio:.3f}** (steady epochs; "
                     f"{results['summary']['ratioAllEpochs'].get(condition, float('nan')):.3f} over all epochs)")
    for job in results["jobs"]:
        if job.get("daemonCpuSeconds") is not None:
            lines.append(f"- {job['name']}: daemon CPU {job['daemonCpuSeconds']:.1f} s, peak RSS {human(job.get('daemonPeakRssBytes') or 0)}")
    for job in results["jobs"]:
        if job.get("status") not in (0, None):
            lines.append(f"- {job['name']}: {job['status']}")
        if job.get("error"):
            lines.append(f"- {job['name']}: ERROR {job['error']}")
    if results.get("stopped"):
        lines.append(f"- run stopped early: {results['stopped']}")
    lines.append(f"- total {results.get('totalSeconds', 0):.0f} s of a {results['args']['budget']} s budget; * = epoch cut at the time limit")
    for job in results["jobs"]:
        if job.get("redirfsStats"):
            lines += ["", f"### redirfs stats after {job['name']}", "```", job["redirfsStats"], "```"]
    return "\n".join(lines) + "\n"


def write_results(args, results):
    results["totalSeconds"] = time.time() - results["startedAt"]
    summarise(results)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown(results))


def check_tags(root):
    """The correctness check reads each sample's tag from the image torchvision's default loader
    returns (Pillow keeps a JPEG's COM segment in .info["comment"]); make sure this Pillow does."""
    from torchvision.datasets.folder import default_loader
    first = sorted(d for d in os.listdir(root) if not d.startswith("."))[0]
    name = sorted(os.listdir(os.path.join(root, first)))[0]
    tag = default_loader(os.path.join(root, first, name)).info.get("comment")
    if not (isinstance(tag, bytes) and tag.startswith(TAG + first.encode() + b":")):
        raise RuntimeError(f"the default loader does not give the tag of {first}/{name} (got {tag!r}): the correctness check cannot work")


def machine_info(args):
    info = {"device": args.device, "cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release(),
            "dataFs": fs_type(os.path.realpath(args.data))}
    try:
        import torch
        import torchvision
        info.update(torch=torch.__version__, torchvision=torchvision.__version__, cudaAvailable=torch.cuda.is_available())
    except Exception as err:  # reported, not fatal here: the job says more
        info["torchError"] = str(err)
    try:
        import PIL
        info["pillow"] = PIL.__version__
    except ImportError:
        pass
    return info


def orchestrate(args):
    started = time.time()
    deadline = started + args.budget
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.data, exist_ok=True)
    results = {"startedAt": started, "args": vars(args), "jobs": [], "machine": {"dataFs": fs_type(os.path.realpath(args.data))}}
    if results["machine"]["dataFs"] in ("tmpfs", "ramfs"):
        log(f"!!! {args.data} is on {results['machine']['dataFs']}: the cold condition cannot be cold there")
    mount = None
    try:
        root, info = ensure_dataset(args)  # before this process imports torch: its pool forks
        results["dataset"] = {"root": root, **info}
        results["machine"] = machine_info(args)
        log(f"machine: {results['machine']}")
        if args.device.startswith("cuda") and not results["machine"].get("cudaAvailable"):
            raise RuntimeError("--device cuda, but torch sees no GPU (use --device cpu to test)")
        check_tags(root)
        write_results(args, results)
        conditions = [c for c in args.conditions.split(",") if c]
        if "cold" in conditions:
            try:
                drop_caches()
            except OSError as err:
                log(f"!!! cannot drop the page cache ({err}): skipping the cold condition")
                results["coldSkipped"] = str(err)
                conditions.remove("cold")
        loaders = [l for l in args.loaders.split(",") if l]
        memory = args.memory or int(info["bytes"] * args.memory_fraction)
        results["redirfsMemory"] = memory
        plan = (["synthetic"] if args.synthetic else []) + [f"{c}-{l}" for c in conditions for l in loaders]
        log(f"plan: {', '.join(plan)}; budget {args.budget} s, {deadline - time.time():.0f} s left")
        for index, name in enumerate(plan):
            now = time.time()
            left = deadline - now - args.reserve
            if left < 10:
                results["stopped"] = f"budget spent before {', '.join(plan[index:])}"
                log(f"!!! {results['stopped']}")
                break
            job = {"name": name}
            results["jobs"].append(job)
            if name == "synthetic":
                share = min(left, args.synthetic_seconds + 60)
                records, status = run_child(args, child_command(args, name, "-", root, args.classes, info["files"], now + share, now + share), now + share + 30, job)
                job["status"] = status
                syn = next((r for r in records if r.get("type") == "synthetic"), None)
                if syn:
                    results["synthetic"] = syn
                    results["machine"]["gpu"] = syn["gpu"]
                    log(f"synthetic: {syn['imgPerSec']:.0f} img/s ({syn['steps']} steps of {args.batch_size})")
                write_results(args, results)
                continue
            condition, loader = name.split("-", 1)
            job.update(condition=condition, loader=loader)
            remaining_jobs = len(plan) - index
            soft = now + left / remaining_jobs
            hard = now + max(left / remaining_jobs * 1.5, min(left, 60))
            hard = min(hard, deadline - args.reserve)
            log(f"== {name}: share {soft - now:.0f} s (hard stop in {hard - now:.0f} s)")
            if condition == "warm":
                t = time.time()
                read_all(root)
                log(f"read the dataset into the page cache in {time.time() - t:.1f} s")
            source = root
            env = dict(os.environ)
            if loader == "redirfs":
                mountpoint = os.path.join(args.work, f"mnt-{name}")
                log_file = os.path.join(args.work, f"daemon-{name}.log")
                job["daemonLog"] = log_file
                try:
                    mount = Mount(args, root, mountpoint, memory, log_file)
                except Exception as err:
                    job["error"] = str(err)
                    log(f"!!! {name}: {err}")
                    write_results(args, results)
                    continue
                job["mountOutput"] = mount.output
                source = mountpoint
                mount.job, mount.cpu0 = job, proc_cpu_seconds(mount.pid) if mount.pid else None
            records, status = run_child(args, child_command(args, name, condition, source, args.classes, info["files"], soft, hard), hard + args.kill_grace, job, env)
            job["status"] = status
            if status != 0:
                log(f"!!! {name}: the job ended with {status}")
            if mount is not None:
                mount.record(name)
                mount.close()
                mount = None
            s = steady(job["epochs"])
            log(f"== {name}: steady {f'{s:.0f}' if s else '-'} img/s")
            write_results(args, results)
    except Stop as why:
        results["stopped"] = str(why)
        log(f"!!! stopped: {why}")
    except Exception:
        import traceback
        results["error"] = traceback.format_exc()
        log(f"!!! {results['error']}")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if mount is not None:
            try:
                mount.record(mount.job["name"])
            except Exception as err:
                log(f"redirfs stats: {err}")
            mount.close()
        unmount_leftovers(args.work)
        if "dataset" in results:
            write_results(args, results)
            print(markdown(results))
    failed = results.get("error") or any(not e["exact"] for j in results["jobs"] for e in j.get("epochs", []) if not e["partial"]) \
        or any(j.get("error") or j.get("status", 0) != 0 for j in results["jobs"]) or "stopped" in results
    return 1 if failed else 0


def option_problem(args):
    """The first option that cannot work, in words; None when they all can."""
    for name, value, least in (("--classes", args.classes, 1), ("--files", args.files, args.classes), ("--epochs", args.epochs, 1),
                               ("--batch-size", args.batch_size, 1), ("--workers", args.workers, 0), ("--budget", args.budget, 1)):
        if value < least:
            return f"{name} must be at least {least}, got {value}"
    for name, value, known in (("--conditions", args.conditions, ("warm", "cold")), ("--loaders", args.loaders, ("pytorch", "redirfs"))):
        unknown = [item for item in value.split(",") if item not in known]
        if unknown or not value:
            return f"{name} takes some of {', '.join(known)}, comma-separated; got '{value}'"
    if not 0 < args.memory_fraction <= 1:
        return f"--memory-fraction must be above 0 and at most 1, got {args.memory_fraction}"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = parser.add_argument_group("dataset")
    g.add_argument("--data", default="/var/tmp/redirfs-gpu-data", help="where the generated dataset is kept (default: %(default)s)")
    g.add_argument("--classes", type=int, default=32)
    g.add_argument("--files", type=int, default=20000, help="JPEGs in all (default: %(default)s, ~2.2 GB)")
    g.add_argument("--quality", type=int, default=90, help="JPEG quality (default: %(default)s)")
    g.add_argument("--gen-workers", type=int, default=0, help="processes generating it (default: one per CPU)")
    g = parser.add_argument_group("training")
    g.add_argument("--device", default="cuda", help="cuda or cpu (default: %(default)s)")
    g.add_argument("--model", default="resnet50", help="a torchvision model name (resnet50, resnet18, ...) or tiny, a 3-layer conv net for CPU tests")
    g.add_argument("--amp", choices=["bf16", "none"], default=None, help="autocast (default: bf16 on cuda, none on cpu)")
    g.add_argument("--batch-size", type=int, default=256)
    g.add_argument("--workers", type=int, default=14, help="DataLoader workers (default: %(default)s)")
    g.add_argument("--epochs", type=int, default=3)
    g.add_argument("--lr", type=float, default=0.1)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--warmup-steps", type=int, default=None, help="untimed steps on random data before a job's first epoch (default: 15 on cuda, 1 on cpu)")
    g.add_argument("--synthetic-seconds", type=float, default=15, help="how long the synthetic ceiling is timed")
    g.add_argument("--loader-timeout", type=float, default=180, help="DataLoader timeout for one batch, seconds")
    g = parser.add_argument_group("what to run")
    g.add_argument("--conditions", default="warm,cold", help="comma list of warm, cold (default: %(default)s)")
    g.add_argument("--loaders", default="pytorch,redirfs", help="comma list of pytorch, redirfs (default: %(default)s)")
    g.add_argument("--no-synthetic", dest="synthetic", action="store_false", help="skip the synthetic ceiling")
    g = parser.add_argument_group("redirfs")
    g.add_argument("--redirfs", default=os.path.join(ROOT, "bin", "redirfs"), help="the CLI (default: this tree's, %(default)s)")
    g.add_argument("--memory-fraction", type=float, default=0.25, help="--memory as a share of the dataset's bytes (default: %(default)s)")
    g.add_argument("--memory", type=int, default=0, help="--memory in bytes (overrides --memory-fraction)")
    g.add_argument("--redirfs-args", default="", help="more `redirfs mount` options, one string (e.g. '--chunk-size 32')")
    g.add_argument("--log-level", default="info", help="daemon log level (default: %(default)s)")
    g.add_argument("--mount-timeout", type=float, default=120)
    g = parser.add_argument_group("run")
    g.add_argument("--budget", type=float, default=330, help="seconds for the whole run, dataset included (default: %(default)s)")
    g.add_argument("--reserve", type=float, default=15, help="seconds of the budget kept for unmounting and writing results")
    g.add_argument("--kill-grace", type=float, default=30, help="seconds past its hard limit before a job is killed")
    g.add_argument("--work", default="/tmp/redirfs-gpu", help="mountpoints and daemon logs (default: %(default)s)")
    g.add_argument("--out", default=os.environ.get("OUT") or "/tmp/redirfs-gpu-out", help="results.json and results.md go here (default: $OUT)")
    # A job: what the orchestrator runs in a child process.
    for name, kind in (("--job-name", str), ("--condition", str), ("--root", str), ("--classes-seen", int), ("--samples-expected", int),
                       ("--soft-deadline", float), ("--hard-deadline", float)):
        parser.add_argument(name, type=kind, help=argparse.SUPPRESS)
    args = parser.parse_args()
    problem = option_problem(args)
    if problem:
        parser.error(problem)
    if args.amp is None:
        args.amp = "bf16" if args.device.startswith("cuda") else "none"
    if args.warmup_steps is None:
        args.warmup_steps = 15 if args.device.startswith("cuda") else 1
    if args.job_name:
        run_job(args)
        return 0
    args.data, args.work, args.out = os.path.abspath(args.data), os.path.abspath(args.work), os.path.abspath(args.out)
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
