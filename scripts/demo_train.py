"""Demo helper: make a labelled PNG dataset, and read it as a trainer would.

Every image's first pixel encodes (class, id), so whatever file the mount
serves for an open, the reader can tell which sample it got and check it
against the label ImageFolder derived from the path it opened.
"""
import os
import sys
import time

import numpy as np
from PIL import Image


CLASSES = ["airplane", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck", "zebra"]


def generate(root):
    rng = np.random.default_rng(0)
    for c, name in enumerate(CLASSES):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(40 + 8 * c):
            pixels = rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
            pixels[0, 0] = (c, i // 256, i % 256)
            Image.fromarray(pixels).save(os.path.join(root, name, f"{i:04d}.png"))
    print(f"generated {sum(40 + 8 * c for c in range(len(CLASSES)))} PNGs in {len(CLASSES)} classes")


def train(root):
    import torch
    from torchvision import datasets, transforms

    torch.manual_seed(0)
    dataset = datasets.ImageFolder(root, transform=transforms.PILToTensor())
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2)
    for epoch in range(3):
        start = time.time()
        seen, wrong = [], 0
        for images, labels in loader:
            for image, label in zip(images, labels):
                c, hi, lo = (int(v) for v in image[:, 0, 0])
                seen.append((c, hi * 256 + lo))
                wrong += dataset.classes[label] != CLASSES[c]
        duplicates = len(seen) - len(set(seen))
        print(f"epoch {epoch}: {len(seen)} samples in {time.time() - start:.2f}s, "
              f"wrong labels {wrong}, duplicates {duplicates}, distinct {len(set(seen))}/{len(dataset)}")
        if wrong or duplicates or len(set(seen)) != len(dataset):
            sys.exit("demo: the data the trainer saw is wrong")


if __name__ == "__main__":
    {"generate": generate, "train": train}[sys.argv[1]](sys.argv[2])
