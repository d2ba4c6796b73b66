"""What the benches share: where things are, the generated dataset, the commit a result comes from,
cold caches, a redirfs mount and the trainer run under the limits.

bench/run.py (every loader from a directory or a pack) and bench/objects.py (from a bucket) import
it; neither imports the other's internals (run.py hands `--profile s3` to objects.py).
"""
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile

from cpu import cpu_seconds

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REDIRFS = os.path.join(ROOT, "bin", "redirfs")
PYTHON = "/usr/bin/python3"
TRAINER = os.path.join(HERE, "trainer.py")
CGROUP = "redirfs-bench"
DAEMON_ALLOWANCE = 128 * 2**20  # the redirfs daemon's own memory beyond its --memory budget


def size_arg(text):
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    text = text.strip().lower().rstrip("b").rstrip("i")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def log(message):
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- data

def _make_class(args):
    root, c, count, seed = args
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed * 100_003 + c)
    directory = os.path.join(root, f"class{c:03d}")
    os.makedirs(directory, exist_ok=True)
    total = 0
    for i in range(count):
        side = int(rng.integers(320, 450))
        base = rng.integers(0, 256, size=(side // 4, side // 4, 3), dtype=np.uint8)
        image = np.asarray(Image.fromarray(base).resize((side, side), Image.BILINEAR)).astype(np.int16)
        image += rng.integers(-50, 50, size=image.shape).astype(np.int16)
        path = os.path.join(directory, f"img{i:06d}.jpg")
        Image.fromarray(image.clip(0, 255).astype(np.uint8)).save(path, "JPEG", quality=90)
        total += os.path.getsize(path)
    return total


DATASET_GENERATOR = 1  # raise when _make_class or the class sizes change: cached datasets are then made again


def class_counts(files, classes):
    """Files per class: uneven, as real datasets' are (weights between 0.5 and 1.5), about `files` in all."""
    weights = [0.5 + ((c * 7919) % 1000) / 1000 for c in range(classes)]
    return [max(1, round(files * w / sum(weights))) for w in weights]


def ensure_dataset(data_dir, size, classes, seed):
    """The generated dataset, made once and kept; one made by another generator or with other
    parameters is made again."""
    root = os.path.join(data_dir, f"jpeg-{size // 2**20}M-{classes}c-s{seed}")
    marker = os.path.join(root, ".complete.json")
    wanted = {"generator": DATASET_GENERATOR, "size": size, "classes": classes, "seed": seed}
    if os.path.exists(marker):
        with open(marker) as f:
            info = json.load(f)
        made = {key: info.get(key) for key in wanted}
        if made == wanted:
            return root, {key: info[key] for key in ("files", "bytes", "classes")}
        log(f"{root} was made with {made}, this bench makes {wanted}: generating again")
    shutil.rmtree(root, ignore_errors=True)
    counts = class_counts(max(classes, size // (110 * 1024)), classes)
    log(f"generating {sum(counts)} JPEGs in {classes} classes into {root} (once; kept for later runs)")
    with concurrent.futures.ProcessPoolExecutor(os.cpu_count()) as pool:
        total = sum(pool.map(_make_class, [(root, c, n, seed) for c, n in enumerate(counts)]))
    info = {"files": sum(counts), "bytes": total, "classes": classes}
    with open(marker, "w") as f:
        json.dump({**wanted, **info}, f)
    return root, info


def code_version():
    """The commit the figures come from, marked when the code differs from it (earlier results do not count)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results") else "")


def drop_caches(ffcv=False):
    """Cold data, warm code: drop the page cache, then read the trainer's and the daemon's code
    back from outside the cgroups, so device counters and memory limits see only the data."""
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1")
    subprocess.run([PYTHON, "-c", "import torch, torchvision, PIL.Image, numpy, multiprocessing.shared_memory" + (", ffcv.loader" if ffcv else "")], check=True)
    subprocess.run(["node", "-e", f"require({json.dumps(os.path.join(ROOT, 'dist', 'cli', 'main.js'))}); require({json.dumps(os.path.join(ROOT, 'dist', 'daemon', 'daemon.js'))})"], check=True)


class Infeasible(Exception):
    """A configuration redirfs refuses (e.g. memory too small for the chunk size)."""


def peak_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class Mount:
    """A redirfs mount, its daemon in the limits' groups; `env`: the CLI's environment (a bucket's keys), else this process's."""

    def __init__(self, source, mode, memory, limits, extra=(), env=None):
        self.mountpoint = tempfile.mkdtemp(prefix="redirfs-bench-mnt-")
        done = subprocess.run([REDIRFS, "mount", source, self.mountpoint, "--memory", str(memory), "--redirect", mode, "--log-level", "warn", *extra],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        if done.returncode != 0:
            os.rmdir(self.mountpoint)
            raise Infeasible(done.stderr.strip().removeprefix("redirfs: "))
        self.pid = self.stats()["pid"]
        limits.add(self.pid)

    def stats(self):
        with open(os.path.join(self.mountpoint, ".redirfs", "stats")) as f:
            return json.load(f)

    def cpu_seconds(self):
        return cpu_seconds(self.pid)

    def peak_rss(self):
        return peak_rss(self.pid)

    def close(self):
        subprocess.run([REDIRFS, "umount", "--force", self.mountpoint], check=False)
        os.rmdir(self.mountpoint)


def run_trainer(limits, root, loader, pipeline, args, info, cache_bytes=0):
    command = [PYTHON, TRAINER, root, "--loader", loader, "--pipeline", pipeline, "--epochs", str(args.epochs),
               "--workers", str(args.workers), "--batch-size", str(args.batch_size), "--cache-bytes", str(cache_bytes),
               "--samples", str(info["files"])]
    done = subprocess.run(limits.wrap(command), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the trainer failed ({loader}, {pipeline}; exit {done.returncode}):\n{done.stderr[-3000:]}")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [line for line in lines if "epoch" in line], next((line for line in lines if "staticHits" in line), {})
