"""Is the machine busy? How much CPU other processes took while we measured, and a quick speed calibration.

Timings taken while another process holds the cores are not this machine's speed: they can be many times off.
``LoadMeter`` reads the kernel's CPU counters (``/proc/stat``: all processes, and the hypervisor's steal time)
and this process's own CPU time (``/proc/self/stat``) at both ends of an interval; what the machine spent beyond
our own share is other processes' work. ``calibrate`` times a fixed small matrix product, so two calibrations
of one run show whether the machine slowed down between them. Linux only; elsewhere the meter reports nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

BUSY_CORES = 0.5  # other processes (or steal) using more than this many cores on average = busy
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Load:
    others_cores: float  # average cores used by other processes
    steal_cores: float  # average cores the hypervisor gave to other machines
    own_cores: float  # average cores this process used
    cores: int
    wall_s: float

    @property
    def busy(self) -> bool:
        return self.others_cores + self.steal_cores > BUSY_CORES

    def describe(self) -> str:
        text = f"other processes used {self.others_cores:.1f} of {self.cores} cores"
        if self.steal_cores > 0.05:
            text += f" and the hypervisor took {self.steal_cores:.1f} more"
        return text


def _system_ticks() -> tuple[int, int] | None:
    """(busy ticks of all CPUs except steal, steal ticks) since boot."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return user + nice + system + irq + softirq, steal


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
        self._start = (time.perf_counter(), _system_ticks(), _own_ticks())
        return self

    def stop(self) -> Load | None:
        t0, sys0, own0 = self._start
        wall, sys1, own1 = time.perf_counter() - t0, _system_ticks(), _own_ticks()
        if None in (sys0, sys1, own0, own1) or wall < 0.2:  # ticks are 10 ms: too short to say anything
            return None
        span = wall * TICKS
        others = max(0.0, (sys1[0] - sys0[0]) - (own1 - own0)) / span
        self.load = Load(others, max(0.0, sys1[1] - sys0[1]) / span, (own1 - own0) / span, os.cpu_count() or 1, wall)
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
