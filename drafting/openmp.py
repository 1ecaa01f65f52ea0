"""Hand back a thread's idle OpenMP workers, so that torch running on another thread keeps its full speed.

Each thread that runs torch ops on the CPU gets its own team of OpenMP worker threads, kept after use. Once
the threads kept by all teams outnumber the cores, GNU OpenMP stops spin-waiting between parallel regions and
puts its workers to sleep instead: on a 2-core machine a decode on a worker thread, after the main thread has
run torch once (loading the model, a warm-up), was measured ~18% slower than the same decode on the main thread.
An app that decodes off its main thread calls ``release_idle_workers()`` on the main thread first.
"""

from __future__ import annotations

import ctypes
import sys
from functools import lru_cache

RUNTIMES = ("libgomp", "libiomp", "libomp")  # GNU, Intel and LLVM OpenMP runtimes
SOFT_PAUSE = 1  # omp_pause_soft: let the threads go, keep the settings


@lru_cache(maxsize=1)
def _pause():
    """``omp_pause_resource_all`` of the OpenMP runtime torch loaded, or None when there is none to find."""
    import torch  # noqa: F401  (loads the runtime)

    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if line.rstrip().endswith(".so") or ".so." in line}
    except OSError:
        return None
    for path in sorted(paths):
        name = path.rsplit("/", 1)[-1]
        if name.startswith(RUNTIMES):
            try:
                fn = ctypes.CDLL(path).omp_pause_resource_all  # already loaded: the same runtime torch uses
            except (OSError, AttributeError):
                continue
            fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
            return fn
    return None


def release_idle_workers() -> bool:
    """Let the calling thread's idle OpenMP workers go (they come back if it runs torch again). True if done."""
    fn = _pause()
    return fn is not None and fn(SOFT_PAUSE) == 0
