"""Reads a redirfs mount the way PyTorch training does, and reports what it got.

generate <root>          writes an ImageFolder of PNGs whose first pixel
                         encodes (class index, sample id), plus table.json
                         mapping every sample identity to its class directory.
read <mnt> <table> ...   reads every sample once per epoch and prints JSON:
                         per epoch, the identities received and how many had
                         a label that does not match their class.

Loaders: pil (ImageFolder's default), cv2 (cv2.imread), cv2decode
(cv2.imdecode of numpy.fromfile), numpy (numpy.fromfile then PIL decode),
tvio (torchvision.io.read_file then decode_image).
"""
import argparse
import io
import json
import os
import sys

import numpy as np

CLASS_SIZES = {"ant": 30, "bee": 1, "cat": 45, "dog": 20, "eel": 38, "fox": 12, "gnu": 27, "hen": 17}


def generate(root):
    from PIL import Image
    rng = np.random.default_rng(0)
    table = {}
    for c, (name, count) in enumerate(sorted(CLASS_SIZES.items())):
        for i in range(count):
            sub = "nested/" if i % 4 == 3 else ""
            os.makedirs(os.path.join(root, name, sub), exist_ok=True)
            # Uneven sizes, so a redirected file usually has another length.
            side = 16 + (i * 7) % 24
            pixels = rng.integers(0, 256, size=(side, side, 3), dtype=np.uint8)
            pixels[0, 0] = (c, i // 256, i % 256)
            Image.fromarray(pixels).save(os.path.join(root, name, sub, f"s{i:03d}.png"))
            table[f"{c}:{i}"] = name
    with open(os.path.join(os.path.dirname(root), "table.json"), "w") as f:
        json.dump(table, f)


def identity_of_rgb(pixel):
    c, hi, lo = (int(v) for v in pixel)
    return f"{c}:{hi * 256 + lo}"


def make_loader(kind):
    import torch
    from PIL import Image

    if kind == "pil":
        return None  # ImageFolder's default loader
    if kind == "cv2":
        import cv2

        def load(path):
            image = cv2.imread(path, cv2.IMREAD_COLOR)
            if image is None:
                raise OSError(f"cv2.imread could not read {path}")
            return np.ascontiguousarray(image[:, :, ::-1])
        return load
    if kind == "cv2decode":
        import cv2

        def load(path):
            return np.ascontiguousarray(cv2.imdecode(np.fromfile(path, dtype=np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1])
        return load
    if kind == "numpy":
        def load(path):
            return np.array(Image.open(io.BytesIO(np.fromfile(path, dtype=np.uint8).tobytes())).convert("RGB"))
        return load
    if kind == "tvio":
        from torchvision.io import ImageReadMode, decode_image, read_file

        def load(path):
            return decode_image(read_file(path), mode=ImageReadMode.RGB).permute(1, 2, 0).numpy()
        return load
    raise SystemExit(f"unknown loader {kind}")


def read(args):
    import torch
    from torchvision import datasets

    with open(args.table) as f:
        table = json.load(f)
    loader = make_loader(args.loader)
    kwargs = {} if loader is None else {"loader": loader}
    # Keep only what identifies the sample: its first pixel.
    transform = (lambda image: np.asarray(image)[0, 0].tolist()) if loader is None else (lambda array: np.asarray(array)[0, 0].tolist())
    dataset = datasets.ImageFolder(args.mnt, transform=transform, **kwargs)

    distributed = args.world > 1
    if distributed:
        import torch.distributed as dist
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
        received, wrong = [], 0
        for batch in data:
            for sample, label in batch:
                identity = identity_of_rgb(sample)
                received.append(identity)
                if table.get(identity) != dataset.classes[label]:
                    wrong += 1
        epochs.append({"received": received, "wrongLabels": wrong})
        if distributed:
            dist.barrier()  # as DDP's per-step all-reduce keeps ranks in step
    print(json.dumps({"samples": len(dataset), "epochs": epochs}))


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate")
    g.add_argument("root")
    r = sub.add_parser("read")
    r.add_argument("mnt")
    r.add_argument("table")
    r.add_argument("--loader", default="pil")
    r.add_argument("--epochs", type=int, default=3)
    r.add_argument("--workers", type=int, default=4)
    r.add_argument("--persistent", action="store_true")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--rank", type=int, default=0)
    r.add_argument("--world", type=int, default=1)
    r.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.command == "generate":
        generate(args.root)
    else:
        read(args)


if __name__ == "__main__":
    sys.exit(main())
