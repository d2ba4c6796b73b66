"""The bench's memory and read limits, in cgroup v1 or v2, whichever the machine has.

Both kinds give the same five things: a memory limit on everything in the group (processes and
the page cache they fill), its peak, a read throttle on one device (IOPS and bytes/s), the bytes
and reads that device served to the group, and a command wrapper that puts a process in the group
before it execs. `detect()` picks the kind; each removes its groups on close.
"""
import os

CGROUP_ROOT = "/sys/fs/cgroup"
_remove_group = os.rmdir  # a cgroup directory is removed empty-handed, its files are the kernel's


class CgroupUnavailable(Exception):
    """Neither cgroup version can limit memory and reads here; the message says what is missing."""


def detect(name, iops, bps, device, root=CGROUP_ROOT):
    """Limits in cgroup v2 where the unified hierarchy is mounted at `root`, else in v1."""
    if os.path.exists(os.path.join(root, "cgroup.controllers")):
        return CgroupV2(name, iops, bps, device, root)
    if os.path.exists(os.path.join(root, "memory", "memory.limit_in_bytes")) and os.path.isdir(os.path.join(root, "blkio")):
        return CgroupV1(name, iops, bps, device, root)
    raise CgroupUnavailable(
        f"bench: needs cgroup memory and read limits, and {root} has neither cgroup v2 (cgroup.controllers) "
        f"nor cgroup v1 memory and blkio hierarchies; mount one (e.g. `mount -t cgroup2 none {root}`) "
        "or run in a container that delegates them")


def _write(group, name, value):
    with open(os.path.join(group, name), "w") as f:
        f.write(value)


def _read(group, name):
    with open(os.path.join(group, name)) as f:
        return f.read()


def _empty_and_remove(group, parent):
    """Move any process left in `group` to `parent`, then remove the group."""
    if not os.path.isdir(group):
        return
    for pid in _read(group, "cgroup.procs").split():
        try:
            _write(parent, "cgroup.procs", pid)
        except OSError:
            pass  # it exited meanwhile
    _remove_group(group)


class _Cgroups:
    """What both versions do the same way: processes join every group of ours."""

    def add(self, pid):
        for group in self.groups():
            _write(group, "cgroup.procs", str(pid))

    def wrap(self, command):
        """A command that joins the groups before it execs."""
        joins = "; ".join(f"echo $$ > {g}/cgroup.procs" for g in self.groups())
        return ["sh", "-c", f'{joins}; exec "$@"', "bench"] + command


class CgroupV1(_Cgroups):
    """Our own groups under the v1 memory and blkio hierarchies."""
    version = 1

    def __init__(self, name, iops, bps, device, root=CGROUP_ROOT):
        self.root = root
        self.memory = os.path.join(root, "memory", name)
        self.blkio = os.path.join(root, "blkio", name)
        self.device = device
        self.close()
        os.makedirs(self.memory)
        os.makedirs(self.blkio)
        if iops:
            _write(self.blkio, "blkio.throttle.read_iops_device", f"{device} {iops}")
        if bps:
            _write(self.blkio, "blkio.throttle.read_bps_device", f"{device} {bps}")

    def set_memory_limit(self, limit):
        """`limit` bytes, or -1 for none."""
        _write(self.memory, "memory.limit_in_bytes", str(limit))

    def peak_memory(self):
        return int(_read(self.memory, "memory.max_usage_in_bytes"))

    def reset_peak_memory(self):
        _write(self.memory, "memory.max_usage_in_bytes", "0")

    def groups(self):
        return (self.memory, self.blkio)

    def device_reads(self):
        """(bytes, reads) the device served to the group so far."""
        result = {}
        for name, key in (("blkio.throttle.io_service_bytes", "bytes"), ("blkio.throttle.io_serviced", "ops")):
            for line in _read(self.blkio, name).splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[0] == self.device and parts[1] == "Read":
                    result[key] = int(parts[2])
        return result.get("bytes", 0), result.get("ops", 0)

    def close(self):
        _empty_and_remove(self.memory, os.path.join(self.root, "memory"))
        _empty_and_remove(self.blkio, os.path.join(self.root, "blkio"))


class CgroupV2(_Cgroups):
    """One group in the unified hierarchy with the memory and io controllers."""
    version = 2

    def __init__(self, name, iops, bps, device, root=CGROUP_ROOT):
        self.root = root
        self.group = os.path.join(root, name)
        self.device = device
        self.iops, self.bps = iops, bps
        available = _read(root, "cgroup.controllers").split()
        missing = [c for c in ("memory", "io") if c not in available]
        if missing:
            raise CgroupUnavailable(f"bench: cgroup v2 at {root} lacks the {' and '.join(missing)} controller"
                                    f"{'s' if len(missing) > 1 else ''} (it has: {' '.join(available) or 'none'})")
        enabled = _read(root, "cgroup.subtree_control").split()
        wanted = [f"+{c}" for c in ("memory", "io") if c not in enabled]
        if wanted:
            try:
                _write(root, "cgroup.subtree_control", " ".join(wanted))
            except OSError as why:
                raise CgroupUnavailable(f"bench: cannot enable {' '.join(wanted)} in {root}/cgroup.subtree_control ({why.strerror}); "
                                        "a v2 group with processes cannot delegate controllers: run the bench from a leaf, e.g. a fresh systemd scope")
        self.close()
        self._create()

    def _create(self):
        os.makedirs(self.group)
        limits = [f"riops={self.iops}" if self.iops else "", f"rbps={self.bps}" if self.bps else ""]
        if any(limits):
            _write(self.group, "io.max", f"{self.device} {' '.join(l for l in limits if l)}")

    def set_memory_limit(self, limit):
        """`limit` bytes, or -1 for none."""
        _write(self.group, "memory.max", "max" if limit < 0 else str(limit))

    def peak_memory(self):
        try:
            return int(_read(self.group, "memory.peak"))
        except FileNotFoundError:
            raise CgroupUnavailable("bench: cgroup v2 without memory.peak (Linux 5.19 or later has it)")

    def reset_peak_memory(self):
        """v2 has no machine-wide reset of memory.peak: start a fresh group (only when it is empty)."""
        if _read(self.group, "cgroup.procs").split():
            raise RuntimeError("reset_peak_memory: the bench's cgroup still has processes")
        limit = _read(self.group, "memory.max").strip() if os.path.exists(os.path.join(self.group, "memory.max")) else "max"
        self.close()
        self._create()
        _write(self.group, "memory.max", limit)

    def groups(self):
        return (self.group,)

    def device_reads(self):
        """(bytes, reads) the device served to the group so far, from io.stat."""
        for line in _read(self.group, "io.stat").splitlines():
            parts = line.split()
            if parts and parts[0] == self.device:
                fields = dict(part.split("=", 1) for part in parts[1:])
                return int(fields.get("rbytes", 0)), int(fields.get("rios", 0))
        return 0, 0

    def close(self):
        _empty_and_remove(self.group, self.root)
