"""How much memory this process may still take, and how much it has taken at most.

A model's weights are the bulk of what goose holds; weight formats that keep a second copy (``dual``, ``mkl``)
and a plain baseline with its own copy can double that. What is "available" is the kernel's own estimate of what
can be allocated without swapping (``MemAvailable``), bounded by the cgroup's limit where the process runs in one
(a container), so a limit set for this process counts, not the host's memory.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

GIB = 1 << 30


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """What the cgroup (v2, else v1) still lets this process allocate; None without a limit."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 1 << 60:
            return None
        return max(int(limit) - usage, 0)
    return None


def available_bytes() -> int | None:
    """Bytes this process can still allocate without swapping; None where the system does not say."""
    found = [b for b in (_meminfo_available(), _cgroup_room()) if b is not None]
    return min(found) if found else None


def peak_rss_bytes() -> int:
    """The most resident memory this process has held so far."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # macOS says bytes, Linux kilobytes


def gib(n: int) -> str:
    return f"{n / GIB:.1f} GB"
