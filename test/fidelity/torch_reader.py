"""Reads a redirfs mount the way PyTorch training does, and reports what it got.

generate <root>          writes an ImageFolder of PNGs whose first pixel
                         encodes (class index, sample id), plus table.json
                         mapping every sample identity to its class directory
                         (relative to <root>). --shape splits writes train/ and
                         val/, each with the same classes (as ImageNet copies
                         are laid out); --shape videos writes
                         <class>/<video>/<frame>.png with one or two frames
                         per video.
read <mnt> <table> ...   reads every sample once per epoch and prints JSON:
                         per epoch, the identities received and how many had
                         a label that does not match their class.
splits <mnt> <table> ... a training run over a train/val root: each epoch
                         ImageFolder(<mnt>/train) shuffled, then (every
                         --val-every epochs) ImageFolder(<mnt>/val) in order.

Loaders: pil (ImageFolder's default), pilverify (PIL verify(), then open
again to decode), cv2 (cv2.imread), cv2decode (cv2.imdecode of
numpy.fromfile), numpy (numpy.fromfile then PIL decode), tvio
(torchvision.io.read_file then decode_image), tvimage
(torchvision.io.read_image), imageio (imageio.imread), skimage
(skimage.io.imread).
"""
import argparse
import io
import json
import os
import sys
import time

import numpy as np

CLASS_SIZES = {"ant": 30, "bee": 1, "cat": 45, "dog": 20, "eel": 38, "fox": 12, "gnu": 27, "hen": 17}


def generate(root, shape):
    from PIL import Image
    rng = np.random.default_rng(0)
    table = {}
    splits = [("train/", 0), ("val/", 1000)] if shape == "splits" else [("", 0)]
    for prefix, first_id in splits:
        for c, (name, count) in enumerate(sorted(CLASS_SIZES.items())):
            if prefix == "val/":
                count = max(1, count // 3)
            for k in range(count):
                i = first_id + k  # unique across splits
                if shape == "videos":
                    sub = f"video{k // 2:02d}/"  # two frames per video, the last may have one
                else:
                    sub = "nested/" if k % 4 == 3 else ""
                os.makedirs(os.path.join(root, prefix, name, sub), exist_ok=True)
                # Uneven sizes, so a redirected file usually has another length.
                side = 16 + (k * 7) % 24
                pixels = rng.integers(0, 256, size=(side, side, 3), dtype=np.uint8)
                pixels[0, 0] = (c, i // 256, i % 256)
                Image.fromarray(pixels).save(os.path.join(root, prefix, name, sub, f"s{k:03d}.png"))
                table[f"{c}:{i}"] = prefix + name
    with open(os.path.join(os.path.dirname(root), "table.json"), "w") as f:
        json.dump(table, f)


def identity_of_rgb(pixel):
    c, hi, lo = (int(v) for v in pixel)
    return f"{c}:{hi * 256 + lo}"


def make_loader(kind):
    from PIL import Image

    if kind == "pil":
        return None  # ImageFolder's default loader
    if kind == "pilverify":
        def load(path):
            with Image.open(path) as image:
                image.verify()  # a verified image must be opened again before use
            with Image.open(path) as image:
                return image.convert("RGB")
        return load
    if kind in ("cv2", "cv2decode"):
        import cv2
    if kind in ("tvio", "tvimage"):
        from torchvision.io import ImageReadMode, decode_image, read_file, read_image
    if kind == "cv2":
        def load(path):
            image = cv2.imread(path, cv2.IMREAD_COLOR)
            if image is None:
                raise OSError(f"cv2.imread could not read {path}")
            return np.ascontiguousarray(image[:, :, ::-1])
        return load
    if kind == "cv2decode":
        def load(path):
            return np.ascontiguousarray(cv2.imdecode(np.fromfile(path, dtype=np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1])
        return load
    if kind == "numpy":
        def load(path):
            return np.array(Image.open(io.BytesIO(np.fromfile(path, dtype=np.uint8).tobytes())).convert("RGB"))
        return load
    if kind == "tvio":
        def load(path):
            return decode_image(read_file(path), mode=ImageReadMode.RGB).permute(1, 2, 0).numpy()
        return load
    if kind == "tvimage":
        def load(path):
            return read_image(path, mode=ImageReadMode.RGB).permute(1, 2, 0).numpy()
        return load
    if kind == "thread":
        import threading

        def load(path):
            # Each sample read on a thread of its own, after a little work: what a dataset that reads through a
            # thread pool does, and slow enough that a killed job's workers still read for a while after it.
            out = {}

            def read():
                time.sleep(0.02)
                with open(path, "rb") as f:
                    out["bytes"] = f.read()
            thread = threading.Thread(target=read)
            thread.start()
            thread.join()
            return Image.open(io.BytesIO(out["bytes"])).convert("RGB")
        return load
    if kind == "imageio":
        import imageio

        def load(path):
            return np.asarray(imageio.imread(path))[:, :, :3]
        return load
    if kind == "skimage":
        import skimage.io

        def load(path):
            return skimage.io.imread(path)[:, :, :3]
        return load
    raise SystemExit(f"unknown loader {kind}")


def image_folder(root, loader_kind):
    from torchvision import datasets

    loader = make_loader(loader_kind)
    kwargs = {} if loader is None else {"loader": loader}
    # Keep only what identifies the sample: its first pixel.
    return datasets.ImageFolder(root, transform=lambda image: np.asarray(image)[0, 0].tolist(), **kwargs)


def one_pass(data, dataset, table, prefix=""):
    """Reads every batch once: the identities received, and how many came with another class's label."""
    received, wrong = [], 0
    for batch in data:
        for sample, label in batch:
            identity = identity_of_rgb(sample)
            received.append(identity)
            if table.get(identity) != prefix + dataset.classes[label]:
                wrong += 1
    return received, wrong


def read_splits(args):
    import torch

    with open(args.table) as f:
        table = json.load(f)
    torch.manual_seed(args.seed)
    train = image_folder(os.path.join(args.mnt, "train"), args.loader)
    val = image_folder(os.path.join(args.mnt, "val"), args.loader)
    loader = lambda dataset, shuffle: torch.utils.data.DataLoader(  # noqa: E731
        dataset, batch_size=8, shuffle=shuffle, num_workers=args.workers, collate_fn=lambda batch: batch)
    train_data, val_data = loader(train, True), loader(val, False)
    epochs = []
    for epoch in range(args.epochs):
        received, wrong = one_pass(train_data, train, table, "train/")
        result = {"train": received, "trainWrongLabels": wrong, "val": None, "valWrongLabels": 0}
        if epoch % args.val_every == 0:
            result["val"], result["valWrongLabels"] = one_pass(val_data, val, table, "val/")
        epochs.append(result)
    print(json.dumps({"epochs": epochs}))


def read(args):
    import torch

    with open(args.table) as f:
        table = json.load(f)
    dataset = image_folder(args.mnt, args.loader)

    if "TORCHELASTIC_RUN_ID" in os.environ:  # started by torchrun: rank and rendezvous from its environment
        args.rank, args.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    distributed = args.world > 1
    if distributed:
        import torch.distributed as dist
        if "TORCHELASTIC_RUN_ID" in os.environ:
            dist.init_process_group("gloo")
        else:
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=args.world)
        sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=args.world, rank=args.rank, shuffle=True, seed=args.seed)
    else:
        sampler = None
    torch.manual_seed(args.seed)
    data = torch.utils.data.DataLoader(
        dataset, batch_size=8, shuffle=sampler is None, sampler=sampler, num_workers=args.workers,
        persistent_workers=args.persistent and args.workers > 0, collate_fn=lambda batch: batch)

    epochs = []
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        received, wrong = one_pass(data, dataset, table)
        epochs.append({"received": received, "wrongLabels": wrong})
        time.sleep(args.epoch_pause)
        if distributed:
            dist.barrier()  # as DDP's per-step all-reduce keeps ranks in step
    report = json.dumps({"samples": len(dataset), "epochs": epochs})
    if args.out:
        with open(args.out.replace("{rank}", str(args.rank)), "w") as f:
            f.write(report + "\n")
    print(report)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate")
    g.add_argument("root")
    g.add_argument("--shape", choices=["flat", "splits", "videos"], default="flat")
    readers = {}
    for name, workers in (("splits", 2), ("read", 4)):
        r = readers[name] = sub.add_parser(name)
        r.add_argument("mnt")
        r.add_argument("table")
        r.add_argument("--loader", default="pil")
        r.add_argument("--epochs", type=int, default=3)
        r.add_argument("--workers", type=int, default=workers)
        r.add_argument("--seed", type=int, default=0)
    readers["splits"].add_argument("--val-every", type=int, default=1)
    r = readers["read"]
    r.add_argument("--persistent", action="store_true")
    r.add_argument("--epoch-pause", type=float, default=0, help="seconds of end-of-epoch work (an evaluation, a checkpoint)")
    r.add_argument("--rank", type=int, default=0)
    r.add_argument("--world", type=int, default=1)
    r.add_argument("--port", type=int, default=0)
    r.add_argument("--out", help="also write the report to this file ({rank} is replaced by the rank)")
    args = parser.parse_args()
    if args.command == "generate":
        generate(args.root, args.shape)
    elif args.command == "splits":
        read_splits(args)
    else:
        read(args)


if __name__ == "__main__":
    sys.exit(main())
