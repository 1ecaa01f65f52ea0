"""Counting the host reads goose's own code makes: every call, from a module of ``drafting``, of a tensor method
that brings device data to the host (on a GPU each one waits for the device's queue to drain).

On the CPU these calls cost nothing, which is why they are counted rather than timed: the count is what a GPU
would wait for. Calls made by transformers or torch themselves (the model's own forward) are not goose's and
are left out.
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch

import drafting

DRAFTING = str(Path(drafting.__file__).resolve().parent)
# what reads a tensor on the host: the methods, and the conversions of a one-element tensor to a Python number
READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")


def _to_cpu(args, kwargs) -> bool:
    target = args[0] if args else kwargs.get("device")
    if isinstance(target, torch.Tensor) or target is None or isinstance(target, torch.dtype):
        return False
    return torch.device(target).type == "cpu"


@contextmanager
def counting_host_reads():
    """Yields a Counter of (method, file:line) -> calls made from drafting's modules while the block runs."""
    counts: Counter = Counter()
    originals = {name: getattr(torch.Tensor, name) for name in (*READS, "to")}

    def wrapped(name, method):
        def read(self, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(DRAFTING) and (name != "to" or _to_cpu(args, kwargs)):
                frame = sys._getframe(1)
                where = f"{Path(frame.f_code.co_filename).relative_to(Path(DRAFTING).parent)}:{frame.f_lineno}"
                counts[(name, where)] += 1
            return method(self, *args, **kwargs)

        return read

    for name, method in originals.items():
        setattr(torch.Tensor, name, wrapped(name, method))
    try:
        yield counts
    finally:
        for name, method in originals.items():
            setattr(torch.Tensor, name, method)
