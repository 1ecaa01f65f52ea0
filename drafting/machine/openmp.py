"""OpenMP behaviour that decides how goose shares the CPU: whether the user chose the OpenMP wait or thread
settings (then goose changes neither), and handing back a thread's idle OpenMP workers so that torch running on
another thread keeps its full speed.

goose sets no OpenMP start-up variables: none measured better than the runtime's defaults alone and beside a
twin (``scripts/omp_policy.py`` measures candidates; docs/speed.md has the run), so it shares the cores by giving
threads up while other processes hold them (drafting.machine.thread_share). ``GOOSE_OPENMP=keep`` opts out of
that too.

Each thread that runs torch ops on the CPU gets its own team of OpenMP worker threads, kept after use. Once
the threads kept by all teams outnumber the cores, GNU OpenMP stops spin-waiting between parallel regions and
puts its workers to sleep instead: on a 2-core machine a decode on a worker thread, after the main thread has
run torch once (loading the model, a warm-up), was measured slower than the same decode on the main thread.
An app that decodes off its main thread calls ``release_idle_workers()`` on the main thread first.
"""

from __future__ import annotations

import ctypes
import os
import sys
from functools import lru_cache

RUNTIMES = ("libgomp", "libiomp", "libomp")  # GNU, Intel and LLVM OpenMP runtimes
SOFT_PAUSE = 1  # omp_pause_soft: let the threads go, keep the settings

# Variables that shape how OpenMP workers wait or how many there are: if the user set any, goose sets none.
USER_KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_NUM_THREADS")
OPT_OUT = "GOOSE_OPENMP"  # "keep": leave the OpenMP runtime's own defaults


def user_chose(environ=None) -> bool:
    """Whether the user set a wait or thread knob themselves, or opted out with ``GOOSE_OPENMP=keep``: then goose
    changes neither the settings nor the thread count."""
    env = os.environ if environ is None else environ
    return env.get(OPT_OUT, "").strip().lower() == "keep" or any(k in env for k in USER_KNOBS)


def describe_settings(environ=None) -> str:
    """One line for reports: the OpenMP wait settings this process runs with."""
    env = os.environ if environ is None else environ
    knobs = [f"{k}={env[k]}" for k in USER_KNOBS if k in env]
    return " ".join(knobs) + " (set by the user)" if knobs else "OpenMP runtime defaults"


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
