"""Where the CPU and the disk go during a run: per thread of the servers, and the whole machine.

The cluster bench asks whether a run was limited by the cores or by the disk, and what spent the cores:
the machine's busy CPU over the measured epochs, the daemons' share split by kind of thread, what is left
(the trainers: the bench runs nothing else), and the bytes the throttled device served. A sampler thread
records them every PERIOD seconds so that the window of the measured epochs (their wall-clock bounds come
from the trainer) can be cut out afterwards.
"""
import bisect
import glob
import os
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")
PERIOD = 0.1


def cpu_seconds(pid):
    """User + system CPU a process used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu(pid):
    """CPU seconds so far of each thread of a process, and what it waits on now (its wchan)."""
    threads = {}
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            with open(os.path.join(task, "stat")) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(os.path.join(task, "wchan")) as f:
                wchan = f.read()
        except OSError:
            continue  # the thread ended
        threads[int(os.path.basename(task))] = ((int(fields[11]) + int(fields[12])) / TICK, wchan)
    return threads


def thread_kinds(pid, threads):
    """Each thread's kind: the FUSE threads (idle in a read of /dev/fuse in this snapshot, so take it when the
    mount is idle), the main thread (JS, in the daemon), and the others (the thread pool, V8's helpers)."""
    return {tid: "main" if tid == pid else "fuse" if "fuse_dev" in wchan else "other" for tid, (_, wchan) in threads.items()}


def cpu_by_thread_kind(pid, before, after, files):
    """µs of CPU per file between two thread_cpu snapshots, by kind of thread (the second one names the kinds)."""
    split = {"fuse": 0.0, "main": 0.0, "other": 0.0}
    for tid, kind in thread_kinds(pid, after).items():
        split[kind] += (after[tid][0] - before.get(tid, (0.0, ""))[0]) / files * 1e6
    return split


def machine_busy():
    """Seconds of CPU the whole machine spent busy so far, all cores together (all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICK


class Sampler:
    """Records the machine's busy CPU, every thread's CPU of `pids` and the bytes `device_reads()` (a callable
    giving (bytes, operations) so far, as bench/limits.py's) says the device served, every PERIOD seconds."""

    def __init__(self, pids, device_reads=lambda: (0, 0)):
        self.pids = list(pids)
        self.device_reads = device_reads
        self.times, self.busy, self.threads, self.device = [], [], [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *_):
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self):
        while not self._stop.wait(PERIOD):
            self._sample()

    def _sample(self):
        self.times.append(time.time())
        self.busy.append(machine_busy())
        self.threads.append({pid: thread_cpu(pid) for pid in self.pids})
        self.device.append(self.device_reads()[0])

    def _at(self, moment):
        """The index of the sample nearest to a wall-clock moment."""
        i = bisect.bisect_left(self.times, moment)
        return min((j for j in (i - 1, i) if 0 <= j < len(self.times)), key=lambda j: abs(self.times[j] - moment))

    def window(self, start, end, samples, kinds):
        """µs of CPU per sample between two wall-clock moments: the machine's, the servers' by kind of thread
        (`kinds`: each pid's thread kinds, from thread_kinds on an idle snapshot), and the rest; the share of
        the cores the machine kept busy; and the device's bytes per second."""
        a, b = self._at(start), self._at(end)
        seconds = self.times[b] - self.times[a]
        per_sample = 1e6 / max(1, samples)
        split = {"fuse": 0.0, "main": 0.0, "other": 0.0}
        for pid in self.pids:
            first, last = self.threads[a].get(pid, {}), self.threads[b].get(pid, {})
            for tid, (cpu, _) in last.items():
                split[kinds.get(pid, {}).get(tid, "other")] += (cpu - first.get(tid, (0.0, ""))[0]) * per_sample
        machine = (self.busy[b] - self.busy[a]) * per_sample
        return {"seconds": seconds, "coresBusy": (self.busy[b] - self.busy[a]) / max(1e-9, seconds) / os.cpu_count(), "cores": os.cpu_count(),
                "machineMicrosecondsPerSample": machine, "daemonsMicrosecondsPerSample": split,
                "restMicrosecondsPerSample": machine - sum(split.values()),
                "deviceBytesPerSecond": (self.device[b] - self.device[a]) / max(1e-9, seconds)}

    def timeline(self, start, end, step=0.5):
        """[seconds from start, the device's MB/s, the share of the cores busy] every `step` seconds of a window:
        when the disk idled, and whether the cores did then too."""
        points, at = [], start
        while at < end:
            a, b = self._at(at), self._at(min(at + step, end))
            seconds = max(1e-9, self.times[b] - self.times[a])
            points.append([round(at - start, 2), round((self.device[b] - self.device[a]) / seconds / 1e6, 1),
                           round((self.busy[b] - self.busy[a]) / seconds / os.cpu_count(), 2)])
            at += step
        return points
