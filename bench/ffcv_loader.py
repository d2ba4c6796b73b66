"""FFCV, what a user picks instead of redirfs: convert the ImageFolder to a .beton once, then load
it with FFCV's Loader as FFCV advises for data larger than memory (QUASI_RANDOM order,
os_cache=False). Both steps are what a user has to add: a conversion and new training code.

  /usr/bin/python3 bench/ffcv_loader.py write <imagefolder> <out.beton>

bench/run.py writes the .beton once into --data and bench/trainer.py loads it (--loader ffcv).
Needs Debian's python3-ffcv (0.0.3).
"""
import sys

import numpy as np
import torch

# Raise when the conversion below changes: cached .beton files are then written again.
BETON_FORMAT = 2


def _count_batches_on_cpu():
    """FFCV 0.0.3's EpochIterator.run advances its batch index only on CUDA, so on a CPU-only
    machine the QUASI_RANDOM process cache is asked for batch 0 forever and asserts. Count the
    batches per iterator instead (the index is only used to look up the cache's schedule)."""
    from ffcv.loader.epoch_iterator import EpochIterator
    if getattr(EpochIterator.run_pipeline, "counts_batches", False):
        return
    original = EpochIterator.run_pipeline

    def run_pipeline(self, _b_ix, *rest):
        index = getattr(self, "_batches_run", 0)
        self._batches_run = index + 1
        return original(self, index, *rest)

    run_pipeline.counts_batches = True
    EpochIterator.run_pipeline = run_pipeline


class _Decoded(torch.utils.data.Dataset):
    """The ImageFolder's samples as FFCV's writer takes them: (HxWx3 uint8 array, label)."""

    def __init__(self, root):
        from torchvision import datasets
        self.folder = datasets.ImageFolder(root)

    def __len__(self):
        return len(self.folder)

    def __getitem__(self, index):
        image, label = self.folder[index]
        return np.asarray(image), label


# FFCV's Loader holds whole pages of the .beton in memory, as many as its schedule for an epoch needs
# at once. With FFCV's default 8 MiB pages, QUASI_RANDOM at batch 64 over the bench's dataset needed
# 140 of them (1.1 GiB, more than the whole memory limit); with the smallest page FFCV allows, far less.
PAGE_SIZE = 2 * 2**20


def write_beton(root, path, workers):
    """JPEG at quality 90, as the dataset's own files are; full resolution (our images are 320-450 px)."""
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter
    writer = DatasetWriter(path, {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()},
                           page_size=PAGE_SIZE, num_workers=workers)
    writer.from_indexed_dataset(_Decoded(root))


def loader(path, batch_size, workers):
    """The same work as the bench's full pipeline (decode, RandomResizedCrop to 224, float tensor
    in CxHxW), in FFCV's own operations."""
    _count_batches_on_cpu()
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import Convert, ToTensor, ToTorchImage
    pipelines = {"image": [RandomResizedCropRGBImageDecoder((224, 224)), ToTensor(), ToTorchImage(), Convert(torch.float32)],
                 "label": [IntDecoder(), ToTensor()]}
    # FFCV's workers are numba threads, at most one per core (numba refuses more): 4 workers on 2 cores become 2.
    from numba import config
    workers = min(workers, config.NUMBA_NUM_THREADS)
    return Loader(path, batch_size=batch_size, num_workers=workers, order=OrderOption.QUASI_RANDOM, os_cache=False,
                  drop_last=False, seed=0, pipelines=pipelines)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "write":
        sys.exit(__doc__)
    import os
    write_beton(sys.argv[2], sys.argv[3], os.cpu_count())
