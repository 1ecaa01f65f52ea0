"""Phase timing that is right on GPUs: marks at phase boundaries, never around every kernel.

A CUDA call returns before its kernels run, so host timestamps put queued GPU work into whichever phase happens to
wait for it next (the prefill's work into step 1, a verify's compaction into the next step's drafting). On one
CUDA device each mark records an event on the current stream; the events are read once per step, when the step is
over, so the host still runs ahead of the GPU inside a step. Event times are the stream's own clock, which also
counts the host work the GPU waited for, so a phase is what it added to the step's wall time. A model spread over
several devices (``device_map``) gets a synchronize on every device at each mark instead: one stream cannot see
the others' work. On CPU a mark is ``time.perf_counter()`` and nothing else.
"""

from __future__ import annotations

import time

import torch


def model_devices(model: torch.nn.Module) -> list[torch.device]:
    """The CUDA devices that hold ``model``'s parameters (empty on CPU)."""
    seen: dict[str, torch.device] = {}
    for p in model.parameters():
        if p.device.type == "cuda":
            seen.setdefault(str(p.device), p.device)
    return list(seen.values())


class PhaseClock:
    """``mark()`` returns an opaque mark; ``seconds(a, b)`` the time between two marks (after ``settle()``)."""

    def __init__(self, devices: list[torch.device]):
        self.devices = list(devices)
        self.events = len(self.devices) == 1  # one stream sees every kernel of the step
        self._last = None

    @classmethod
    def for_model(cls, model: torch.nn.Module) -> "PhaseClock":
        return cls(model_devices(model))

    def mark(self):
        if self.events:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(torch.cuda.current_stream(self.devices[0]))
            self._last = ev
            return ev
        for dev in self.devices:  # a device map: wait for every device's queue
            torch.cuda.synchronize(dev)
        return time.perf_counter()

    def settle(self) -> None:
        """Wait for the last mark's work to finish (a phase boundary: the end of a step or of the prefill)."""
        if self.events and self._last is not None:
            self._last.synchronize()

    def seconds(self, a, b) -> float:
        if self.events:
            return a.elapsed_time(b) / 1000.0
        return b - a
