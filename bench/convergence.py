"""Convergence parity: does training through redirfs reach the accuracy of raw data?

Exports scikit-learn's bundled digits (no download) to an ImageFolder of PNGs
with a fixed train/test split, then trains the same small CNN with the same
seed on the raw train directory and through a redirfs mount of it in each
mode, with memory set to ~25% of the train set. Test accuracy is always
measured on the raw test directory. Repeats over several seeds, writes
bench/results/convergence.{json,md}, and exits non-zero if a mode's mean
accuracy is more than --tolerance points below raw.

Run: npm run bench:convergence   (or /usr/bin/python3 bench/convergence.py --help)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REDIRFS = os.path.join(HERE, "..", "bin", "redirfs")


def export_digits(root):
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images * (255 / 16)).astype(np.uint8)
    train_x, test_x, train_y, test_y = train_test_split(images, digits.target, test_size=0.25, random_state=0, stratify=digits.target)
    for split, xs, ys in (("train", train_x, train_y), ("test", test_x, test_y)):
        for i, (x, y) in enumerate(zip(xs, ys)):
            directory = os.path.join(root, split, f"digit{y}")
            os.makedirs(directory, exist_ok=True)
            Image.fromarray(x).resize((32, 32), Image.BILINEAR).save(os.path.join(directory, f"{i:05d}.png"))
    return os.path.join(root, "train"), os.path.join(root, "test")


def train(train_root, test_root, seed, epochs):
    import torch
    from torch import nn
    from torchvision import datasets, transforms

    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.set_num_threads(2)
    to_tensor = transforms.Compose([transforms.Grayscale(), transforms.ToTensor()])
    train_set = datasets.ImageFolder(train_root, transform=to_tensor)
    test_set = datasets.ImageFolder(test_root, transform=to_tensor)
    assert train_set.classes == test_set.classes
    generator = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(train_set, batch_size=32, shuffle=True, num_workers=2, generator=generator)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in torch.utils.data.DataLoader(test_set, batch_size=256):
            correct += (model(x).argmax(1) == y).sum().item()
    return 100.0 * correct / len(test_set)


def dir_bytes(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--memory-fraction", type=float, default=0.25)
    parser.add_argument("--chunk-size", type=int, default=16)
    parser.add_argument("--modes", default="strict,pool,off")
    parser.add_argument("--tolerance", type=float, default=1.5, help="points a mode may lose to raw (mean over seeds)")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args()
    modes = args.modes.split(",")

    work = tempfile.mkdtemp(prefix="redirfs-convergence-")
    train_root, test_root = export_digits(work)
    memory = int(dir_bytes(train_root) * args.memory_fraction)
    mountpoint = os.path.join(work, "mnt")
    os.makedirs(mountpoint)
    accuracy = {mode: [] for mode in ["raw"] + modes}
    try:
        for seed in range(args.seeds):
            started = time.time()
            accuracy["raw"].append(train(train_root, test_root, seed, args.epochs))
            for mode in modes:
                subprocess.run([REDIRFS, "mount", train_root, mountpoint, "--memory", str(memory), "--chunk-size", str(args.chunk_size),
                                "--redirect", mode, "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
                try:
                    accuracy[mode].append(train(mountpoint, test_root, seed, args.epochs))
                finally:
                    subprocess.run([REDIRFS, "umount", "--force", mountpoint], check=False)
            print(f"seed {seed}: " + ", ".join(f"{m} {accuracy[m][-1]:.2f}" for m in accuracy) + f" ({time.time() - started:.0f}s)", flush=True)
    finally:
        subprocess.run(["rm", "-rf", work], check=False)

    raw_mean = statistics.mean(accuracy["raw"])
    rows = []
    failed = []
    for mode, values in accuracy.items():
        mean = statistics.mean(values)
        delta = mean - raw_mean
        ok = mode == "raw" or delta >= -args.tolerance
        if not ok:
            failed.append(mode)
        rows.append({"mode": mode, "accuracies": values, "mean": mean, "deltaToRaw": delta, "pass": ok})
    result = {
        "dataset": "sklearn digits, 32x32 PNG, 75/25 stratified split (random_state=0)",
        "model": "2 conv + 2 linear, Adam 1e-3, batch 32",
        "epochs": args.epochs, "seeds": args.seeds, "memoryFraction": args.memory_fraction,
        "chunkSize": args.chunk_size, "memoryBytes": memory, "tolerancePoints": args.tolerance, "rows": rows,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "convergence.json"), "w") as f:
        json.dump(result, f, indent=2)
    table = ["| data | test accuracy per seed (%) | mean | vs raw |", "|---|---|---|---|"]
    for row in rows:
        table.append(f"| {row['mode']} | {', '.join(f'{a:.2f}' for a in row['accuracies'])} | {row['mean']:.2f} | "
                     f"{row['deltaToRaw']:+.2f}{'' if row['pass'] else ' (FAIL)'} |")
    with open(os.path.join(args.out, "convergence.md"), "w") as f:
        f.write("\n".join(table) + "\n")
    print("\n".join(table))
    if failed:
        sys.exit(f"convergence: {', '.join(failed)} more than {args.tolerance} points below raw")


if __name__ == "__main__":
    main()
