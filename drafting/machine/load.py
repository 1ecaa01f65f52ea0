"""Is the machine busy? How much CPU other processes took while we measured, and a quick speed calibration.

Timings taken while another process holds the cores are not this machine's speed: they can be many times off.
``LoadMeter`` reads the kernel's CPU counters (``/proc/stat``: all processes, and the hypervisor's steal time)
and this process's own CPU time (``/proc/self/stat``) at both ends of an interval; what the machine spent beyond
our own share is other processes' work. ``calibrate`` times a fixed small matrix product, so two calibrations
of one run show whether the machine slowed down between them. Linux only; elsewhere the meter reports nothing.

Only the CPUs this process may use count: those of its CPU affinity (``taskset``, a container's cpuset), whose
counters alone are read, and at most as many cores as its cgroup's CPU quota allows (``docker --cpus``). Other
processes on CPUs it cannot run on, or a host far larger than its quota, do not make it busy.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

BUSY_CORES = 0.5  # other processes (or steal) using more than this many cores on average = busy
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
CGROUP = Path("/sys/fs/cgroup")


@dataclass
class Load:
    others_cores: float  # average cores other processes used of the CPUs this process may run on
    steal_cores: float  # average cores the hypervisor gave to other machines
    own_cores: float  # average cores this process used
    cores: int  # cores this process may use (its CPUs, at most its cgroup's quota)
    wall_s: float
    cpus: int = 0  # the CPUs whose counters were read (its affinity); 0: as many as ``cores``

    @property
    def free_cores(self) -> float:
        """The cores other processes (and steal) left to this one."""
        return min(self.cores, (self.cpus or self.cores) - self.others_cores - self.steal_cores)

    @property
    def busy(self) -> bool:
        return self.cores - self.free_cores > BUSY_CORES

    def describe(self) -> str:
        text = f"other processes used {self.others_cores:.1f} of {self.cpus or self.cores} cores"
        if self.steal_cores > 0.05:
            text += f" and the hypervisor took {self.steal_cores:.1f} more"
        return text


def cgroup_cpu_limit(cpu_max: str | None = None, cfs_quota_us: str | None = None,
                     cfs_period_us: str | None = None) -> float | None:
    """The cores a cgroup's CPU quota allows, from the text of cgroup v2's ``cpu.max`` ("150000 100000"; "max
    100000" is none) or of v1's ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` (a quota of -1 is none); None
    where no quota is set or the text is not one."""
    try:
        if cpu_max is not None:
            quota, period = (cpu_max.split() + ["100000"])[:2]
        elif cfs_quota_us is not None and cfs_period_us is not None:
            quota, period = cfs_quota_us.strip(), cfs_period_us.strip()
        else:
            return None
        if quota == "max" or int(quota) < 0 or int(period) <= 0:
            return None
        return int(quota) / int(period)
    except ValueError:
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _cgroup_folders(root: Path, relative: str) -> list[Path]:
    """This process's cgroup folder under ``root`` and those above it (a quota anywhere above applies too); the
    root alone where the path is not visible (a container shows its own cgroup as the root)."""
    here = root / relative.strip("/")
    if not here.is_dir():
        return [root]
    out = [here]
    while here != root and root in here.parents:
        here = here.parent
        out.append(here)
    return out


@lru_cache(maxsize=1)
def _cgroup_limit() -> float | None:
    """The smallest CPU quota over this process's cgroup and its parents (v2, else v1); None where none is set."""
    limits = []
    for line in (_read(Path("/proc/self/cgroup")) or "").splitlines():
        _, controllers, relative = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # cgroup v2
            for folder in _cgroup_folders(CGROUP, relative):
                limits.append(cgroup_cpu_limit(cpu_max=_read(folder / "cpu.max")))
        elif "cpu" in controllers.split(","):
            for mount in (CGROUP / controllers, CGROUP / "cpu", CGROUP / "cpu,cpuacct"):
                if mount.is_dir():
                    for folder in _cgroup_folders(mount, relative):
                        limits.append(cgroup_cpu_limit(cfs_quota_us=_read(folder / "cpu.cfs_quota_us"),
                                                       cfs_period_us=_read(folder / "cpu.cfs_period_us")))
                    break
    found = [limit for limit in limits if limit is not None]
    return min(found) if found else None


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def usable_cores() -> int:
    """The cores this process may use: its CPUs (affinity), at most its cgroup's quota rounded up (a part of a
    core still runs a thread), at least one."""
    cpus = _affinity()
    cores = len(cpus) if cpus else (os.cpu_count() or 1)
    limit = _cgroup_limit()
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(1, cores)


def cpu_ticks(stat: str, cpus: set[int] | None) -> tuple[int, int] | None:
    """(busy ticks except steal, steal ticks) since boot, from the text of ``/proc/stat``: of the CPUs ``cpus``, or
    of all of them (its first line) where ``cpus`` is None."""
    busy = steal = 0
    found = False
    for line in stat.splitlines():
        name, *values = line.split()
        if not name.startswith("cpu"):
            break
        if (name == "cpu") != (cpus is None) or (cpus is not None and int(name[3:]) not in cpus):
            continue
        fields = [int(v) for v in values]
        user, nice, system, _idle, _iowait, irq, softirq, st = (fields + [0] * 8)[:8]
        busy, steal, found = busy + user + nice + system + irq + softirq, steal + st, True
    return (busy, steal) if found else None


def _system_ticks(cpus: set[int] | None) -> tuple[int, int] | None:
    try:
        return cpu_ticks(_read(Path("/proc/stat")) or "", cpus)
    except ValueError:
        return None


def _own_ticks() -> int | None:
    try:
        with open("/proc/self/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()  # the command name may contain spaces
    except (OSError, IndexError):
        return None
    return int(rest[11]) + int(rest[12])  # utime + stime of every thread of this process


class LoadMeter:
    """``with LoadMeter() as m: ...`` then ``m.load`` (None where the counters cannot be read or the interval
    was too short to count)."""

    def __init__(self):
        self.load: Load | None = None
        self._start = None

    def start(self) -> "LoadMeter":
        cpus = _affinity()
        whole = cpus is None or len(cpus) >= (os.cpu_count() or 1)
        self._cpus = None if whole else cpus  # None: the whole machine's line of /proc/stat
        self._start = (time.perf_counter(), _system_ticks(self._cpus), _own_ticks())
        return self

    def stop(self) -> Load | None:
        t0, sys0, own0 = self._start
        wall, sys1, own1 = time.perf_counter() - t0, _system_ticks(self._cpus), _own_ticks()
        if None in (sys0, sys1, own0, own1) or wall < 0.2:  # ticks are 10 ms: too short to say anything
            return None
        span = wall * TICKS
        others = max(0.0, (sys1[0] - sys0[0]) - (own1 - own0)) / span
        cpus = len(self._cpus) if self._cpus is not None else (os.cpu_count() or 1)
        self.load = Load(others, max(0.0, sys1[1] - sys0[1]) / span, (own1 - own0) / span, usable_cores(), wall,
                         cpus=cpus)
        return self.load

    def __enter__(self) -> "LoadMeter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def calibrate(repeats: int = 5) -> float:
    """Median seconds of a fixed float32 matrix product (a few milliseconds on one core)."""
    import torch

    a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        for _ in range(8):
            a @ a
        times.append(time.perf_counter() - t0)
    times = sorted(times[1:])
    return times[len(times) // 2]
