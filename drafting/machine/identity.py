"""What identifies this machine to caches of its timings: CPU, cores, torch, threads, OpenMP settings, and the
device a model runs on."""

from __future__ import annotations

import hashlib
import os
import platform

import torch

from drafting.machine.openmp import USER_KNOBS


def machine_identity() -> dict:
    """What decides which kernel is fastest, the model aside: CPU, cores, torch, threads, OpenMP settings."""
    cpu, flags = _cpu_identity()
    return {
        "machine": platform.machine(),
        "cpu": cpu,
        "cpu_flags": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "openmp": {k: os.environ[k] for k in USER_KNOBS if k in os.environ},
    }


def device_name(device: torch.device) -> str:
    """What names ``device`` in a timing's cache key: the GPU's model on CUDA (``cuda`` alone would hand an
    H100's cost curve to an A100 reading the same cache), ``cpu`` on the CPU (its curves are this machine's, and
    keep the key they were cached under)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return str(device)


def _cpu_identity() -> tuple[str, str]:
    """(model name, flags) of the first CPU in /proc/cpuinfo; the platform's processor string elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read().split("\n\n", 1)[0]
    except OSError:
        return platform.processor(), ""
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return fields.get("model name", platform.processor()), fields.get("flags", "")
