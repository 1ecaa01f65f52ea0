"""Share the cores with other CPU-heavy processes instead of fighting them for every core.

A decode's OpenMP worker threads wait for each other at the end of every parallel region; when another process
holds a core one of them needs, every layer of every step waits for it, and two such processes slow each other
far more than a fair share would (docs/speed.md has the figures and the command). So while it decodes on a CPU,
goose looks about once a second at how many cores other processes took (drafting.machine.load); when they leave
it fewer cores than it runs threads, it runs with the cores that are left (at least one), and goes back to its
own thread count once they are gone. It stays out of the way where the user chose the threads or the OpenMP
policy themselves (drafting.machine.openmp's user knobs, or ``GOOSE_OPENMP=keep``).
"""

from __future__ import annotations

import time

import torch

from drafting.machine.load import Load, LoadMeter
from drafting.machine.openmp import user_chose

INTERVAL_S = 1.0  # how often the load is read (each read is two small /proc files)


def threads_for(load: Load, ceiling: int) -> int:
    """Threads to run with: the cores other processes left free of those this process may use, rounded, between
    1 and ``ceiling``."""
    return max(1, min(ceiling, int(load.free_cores + 0.5)))


class ThreadShare:
    """One per process (thread counts are process-wide); ``tick()`` once per decode step."""

    def __init__(self):
        self.enabled = not user_chose()
        self.ceiling = torch.get_num_threads()
        self.shared = False  # running below the ceiling now
        self._meter = LoadMeter().start()
        self._t = time.perf_counter()

    def run_starts(self) -> None:
        """Read the load from now: the time between runs (a bench's other rows, llama.cpp's own server among
        them) says nothing about who holds the cores while this run decodes."""
        self._meter.start()
        self._t = time.perf_counter()

    def tick(self, own_threads=None) -> str | None:
        """Adjust the thread count if the last second says so; returns a notice when it first gives cores up.
        ``own_threads(n)`` sets the threads of an engine that runs its own (llama.cpp) besides torch's."""
        if not self.enabled or self.ceiling < 2:
            return None
        now = time.perf_counter()
        if now - self._t < INTERVAL_S:
            return None
        load = self._meter.stop()
        self._meter.start()
        self._t = now
        if load is None:
            return None
        want = threads_for(load, self.ceiling)
        if want == torch.get_num_threads():
            return None
        torch.set_num_threads(want)
        if own_threads is not None:
            own_threads(want)
        was_shared, self.shared = self.shared, want < self.ceiling
        if self.shared and not was_shared:
            return (f"sharing the cores: {load.describe()}, so goose decodes on {want} of {self.ceiling} "
                    "threads while they run (each keeps a fair share; this run's speed is not this machine's).")
        return None


_SHARE: ThreadShare | None = None


def _share(device) -> ThreadShare | None:
    global _SHARE
    if device.type != "cpu":
        return None
    if _SHARE is None:
        _SHARE = ThreadShare()
    return _SHARE


def run_starts(device) -> None:
    """A decode run's first call (CPU only)."""
    share = _share(device)
    if share is not None:
        share.run_starts()


def tick(device, own_threads=None) -> str | None:
    """The decode loop's per-step call (CPU only); ``own_threads``: see ``ThreadShare.tick``."""
    share = _share(device)
    return None if share is None else share.tick(own_threads)
