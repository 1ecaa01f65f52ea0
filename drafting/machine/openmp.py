"""OpenMP behaviour that decides how goose shares the CPU: start-up wait settings, and handing back a thread's
idle OpenMP workers so that torch running on another thread keeps its full speed.

Start-up settings (``apply_startup_settings``): GNU OpenMP workers spin between parallel regions before they
sleep. With no setting they spin long, which is fastest alone but collapses when another CPU-heavy process
shares the cores (spinning workers hold the cores the other process's workers wait for); ``OMP_WAIT_POLICY=
PASSIVE`` (sleep at once) shares well but is slow alone. A bounded spin (``GOMP_SPINCOUNT``) sits between the
two. The runtime reads these variables once, when torch loads it, so they are set before torch is imported and
never when the user set any of them. ``STARTUP_SETTINGS`` is the one place the default lives;
``scripts/omp_policy.py`` measures the candidates (alone and beside a twin) to choose it. ``GOOSE_OPENMP=keep``
leaves the runtime's own defaults.

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

# The default start-up setting, chosen with scripts/omp_policy.py (docs/speed.md has the run): no bounded spin
# kept the speed alone and shared the cores better than the runtime's default, so goose sets none and shares
# the cores by giving threads up while other processes hold them (drafting.machine.thread_share).
STARTUP_SETTINGS: dict[str, str] = {}
# Variables that shape how OpenMP workers wait or how many there are: if the user set any, goose sets none.
USER_KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_NUM_THREADS")
OPT_OUT = "GOOSE_OPENMP"  # "keep": leave the OpenMP runtime's own defaults


def user_chose(environ=None) -> bool:
    """Whether the user set a wait or thread knob themselves (goose's own start-up settings do not count), or
    opted out with ``GOOSE_OPENMP=keep``: then goose changes neither the settings nor the thread count."""
    env = os.environ if environ is None else environ
    ours = _APPLIED if environ is None else {}
    return env.get(OPT_OUT, "").strip().lower() == "keep" or any(k in env and ours.get(k) != env[k] for k in USER_KNOBS)


def startup_settings(environ=None) -> dict[str, str]:
    """The variables goose would set now: none if the user set a wait or thread knob, or opted out."""
    return {} if user_chose(environ) else dict(STARTUP_SETTINGS)


def apply_startup_settings(environ=None) -> dict[str, str]:
    """Set the start-up OpenMP variables, only while torch is not imported yet (the runtime reads them when
    torch loads it); returns what was set."""
    if "torch" in sys.modules:
        return {}
    env = os.environ if environ is None else environ
    chosen = startup_settings(env)
    env.update(chosen)
    if environ is None:
        _APPLIED.update(chosen)
    return chosen


_APPLIED: dict[str, str] = {}  # what this process set at start-up


def describe_settings(environ=None) -> str:
    """One line for reports: the OpenMP wait settings this process runs with, and who set them."""
    env = os.environ if environ is None else environ
    knobs = [f"{k}={env[k]}" for k in USER_KNOBS if k in env]
    if not knobs:
        return "OpenMP runtime defaults"
    ours = bool(_APPLIED) and environ is None and all(env.get(k) == v for k, v in _APPLIED.items())
    return " ".join(knobs) + (" (goose's default)" if ours else " (set by the user)")


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
