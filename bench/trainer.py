"""One benchmark run: reads an ImageFolder for some epochs and reports per-epoch times.

Runs inside the benchmark's cgroups (bench/run.py puts it there). Loaders:
  imagefolder  torchvision ImageFolder on the given root (a raw directory or a redirfs mount)
  static       a CoorDL-style static cache: the first --cache-bytes of samples read are kept
               in shared memory and never evicted; the rest is read from the root every epoch
  ffcv         FFCV's Loader over a .beton of the dataset (the root given is the .beton; full
               pipeline only; bench/ffcv_loader.py)
  noio         no I/O at all, the upper bound: in the read pipeline a size, in the full one the
               decode of real samples' bytes held in memory (a few dozen of the dataset's files,
               read once before the clock starts), so decoding costs what it costs elsewhere
Pipelines:
  read         the sample's bytes only (a pure I/O test)
  full         decode + RandomResizedCrop(224) + ToTensor; imagefolder opens each file with
               torchvision's default loader (PIL reading the open file, as an unmodified
               ImageFolder job does); the static cache and No-I/O decode bytes they hold
Prints one JSON line per epoch: {"epoch", "samples", "seconds", "started", "ended"} (the last two wall-clock).
"""
import argparse
import json
import multiprocessing
import time

import torch
from PIL import Image
from torchvision import datasets, transforms


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


FULL = transforms.Compose([transforms.RandomResizedCrop(224), transforms.ToTensor()])


def decode(data):
    import io
    return FULL(Image.open(io.BytesIO(data)).convert("RGB"))


class BytesFolder(torch.utils.data.Dataset):
    """ImageFolder's file list and labels; returns what the pipeline makes of the bytes."""

    def __init__(self, root, pipeline):
        self.folder = datasets.ImageFolder(root, loader=lambda p: p)
        self.pipeline = pipeline

    def __len__(self):
        return len(self.folder.samples)

    def load(self, index):
        return read_bytes(self.folder.samples[index][0])

    def decoded(self, index):
        return FULL(datasets.folder.default_loader(self.folder.samples[index][0]))

    def __getitem__(self, index):
        sample = len(self.load(index)) if self.pipeline == "read" else self.decoded(index)
        return sample, self.folder.samples[index][1]


class StaticCache(BytesFolder):
    """Fill once, never evict: a shared-memory arena that worker processes fill as they read."""

    def __init__(self, root, pipeline, cache_bytes):
        super().__init__(root, pipeline)
        from multiprocessing import shared_memory
        self.arena = shared_memory.SharedMemory(create=True, size=max(1, cache_bytes))
        self.capacity = cache_bytes
        self.used = multiprocessing.Value("q", 0)
        self.slots = multiprocessing.Array("q", 2 * len(self), lock=False)  # offset, length (+1); 0 = not cached
        self.hits = multiprocessing.Value("q", 0)

    def load(self, index):
        offset, length = self.slots[2 * index], self.slots[2 * index + 1]
        if length > 0:
            with self.hits.get_lock():
                self.hits.value += 1
            return bytes(self.arena.buf[offset:offset + length - 1])
        data = read_bytes(self.folder.samples[index][0])
        with self.used.get_lock():
            if self.used.value + len(data) > self.capacity:
                return data
            offset = self.used.value
            self.used.value += len(data)
        self.arena.buf[offset:offset + len(data)] = data
        self.slots[2 * index], self.slots[2 * index + 1] = offset, len(data) + 1
        return data

    def decoded(self, index):
        return decode(self.load(index))

    def close(self):
        self.arena.close()
        self.arena.unlink()


class NoIO(torch.utils.data.Dataset):
    HELD = 64  # files whose bytes the full pipeline decodes in turn: the dataset's mix of sizes, in little memory

    def __init__(self, root, count, pipeline):
        self.count = count
        self.pipeline = pipeline
        self.held = []
        if pipeline == "full":
            paths = [p for p, _ in datasets.ImageFolder(root, loader=lambda p: p).samples]
            step = max(1, len(paths) // self.HELD)
            self.held = [read_bytes(p) for p in paths[::step][:self.HELD]]

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        return (110_000 if self.pipeline == "read" else decode(self.held[index % len(self.held)])), index % 100


def make_loader(args):
    """(dataset, sampler, loader): a DataLoader over one of the datasets above, or FFCV's own Loader."""
    if args.loader == "ffcv":
        import ffcv_loader
        return None, None, ffcv_loader.loader(args.root, args.batch_size, args.workers)
    if args.loader == "noio":
        dataset = NoIO(args.root, args.samples, args.pipeline)
    elif args.loader == "static":
        dataset = StaticCache(args.root, args.pipeline, args.cache_bytes)
    else:
        dataset = BytesFolder(args.root, args.pipeline)
    sampler = None
    if args.world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=args.world)
        sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=args.world, rank=args.rank, shuffle=True)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
                                         num_workers=args.workers, persistent_workers=args.workers > 0)
    return dataset, sampler, loader


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root")
    parser.add_argument("--loader", choices=["imagefolder", "static", "ffcv", "noio"], default="imagefolder")
    parser.add_argument("--pipeline", choices=["read", "full"], default="read")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--cache-bytes", type=int, default=0)
    parser.add_argument("--samples", type=int, default=0, help="noio: how many samples an epoch has")
    parser.add_argument("--world", type=int, default=1, help="DistributedSampler ranks (a cluster run)")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--port", type=int, default=0, help="gloo rendezvous port on 127.0.0.1")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    if args.loader == "ffcv" and (args.pipeline != "full" or args.world > 1):
        parser.error("--loader ffcv runs the full pipeline on one rank only")
    dataset, sampler, loader = make_loader(args)
    try:
        for epoch in range(args.epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
                torch.distributed.barrier()  # ranks start an epoch together, as DDP keeps them in step
            started = time.time()
            samples = 0
            for batch, _ in loader:
                samples += len(batch)
            if sampler is not None:
                torch.distributed.barrier()
            ended = time.time()
            print(json.dumps({"epoch": epoch, "samples": samples, "seconds": ended - started, "started": started, "ended": ended}), flush=True)
        if args.loader == "static":
            print(json.dumps({"staticHits": dataset.hits.value, "staticBytes": dataset.used.value}), flush=True)
    finally:
        if args.loader == "static":
            dataset.close()


if __name__ == "__main__":
    main()
