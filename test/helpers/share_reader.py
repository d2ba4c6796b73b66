"""One node's trainer in a cluster test: reads the share of each epoch it is given, as a DistributedSampler rank would.

    share_reader.py <mountpoint> [--readers N]

A training job is one process per node with REDIRFS_RUN_ID in its environment (the test sets it). Each line on
stdin is one epoch, a JSON list of sample paths relative to the mountpoint; the reader reads them with N threads
(a DataLoader's workers), each file whole, and prints one JSON line per open: {"opened", "sha1"} or {"opened",
"error"} (the errno's name), then {"done": <epoch>} once the whole share is read. Between epochs it waits for the
next line: the test is the barrier that keeps ranks in step, as DDP's all-reduce does. Stdin closed: it exits.
"""
import argparse
import errno
import hashlib
import json
import os
import sys
import threading
import time

# A trainer's epoch boundary is longer than the mount's re-open window (docs/design.md, "Loaders").
EPOCH_BOUNDARY_S = 0.12


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mountpoint")
    parser.add_argument("--readers", type=int, default=4)
    args = parser.parse_args()
    out = threading.Lock()

    def say(message):
        with out:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def read(relative):
        try:
            with open(os.path.join(args.mountpoint, relative), "rb") as f:
                say({"opened": relative, "sha1": hashlib.sha1(f.read()).hexdigest()})
        except OSError as err:
            say({"opened": relative, "error": errno.errorcode.get(err.errno, str(err.errno))})

    for epoch, line in enumerate(sys.stdin):
        if epoch > 0:
            time.sleep(EPOCH_BOUNDARY_S)
        share = json.loads(line)
        lock = threading.Lock()

        def work():
            while True:
                with lock:
                    if not share:
                        return
                    relative = share.pop(0)
                read(relative)

        threads = [threading.Thread(target=work) for _ in range(args.readers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        say({"done": epoch})


if __name__ == "__main__":
    main()
