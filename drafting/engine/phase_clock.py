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


class EventMark:
    """A CUDA event recorded at a phase boundary; ``b - a`` is the seconds between two marks, waiting for ``b``'s
    work if it has not finished (read marks after ``settle()`` to wait only once a step)."""

    __slots__ = ("event",)

    def __init__(self, stream):
        self.event = torch.cuda.Event(enable_timing=True)
        self.event.record(stream)

    def __sub__(self, earlier: "EventMark") -> float:
        self.event.synchronize()
        return earlier.event.elapsed_time(self.event) / 1000.0


class PhaseClock:
    """``mark()`` returns a mark (a float on CPU or a device map, an ``EventMark`` on one CUDA device); marks
    subtract to seconds. ``settle()`` waits for the last mark, once per phase boundary that needs the figures."""

    def __init__(self, devices: list[torch.device]):
        self.devices = list(devices)
        self.events = len(self.devices) == 1  # one stream sees every kernel of the step
        self._last = None

    @classmethod
    def for_model(cls, model: torch.nn.Module) -> "PhaseClock":
        return cls(model_devices(model))

    def mark(self):
        if self.events:
            self._last = EventMark(torch.cuda.current_stream(self.devices[0]))
            return self._last
        for dev in self.devices:  # a device map: wait for every device's queue
            torch.cuda.synchronize(dev)
        return time.perf_counter()

    def settle(self) -> None:
        """Wait for the last mark's work to finish (a phase boundary: the end of a step or of the prefill)."""
        if self.events and self._last is not None:
            self._last.event.synchronize()

    @staticmethod
    def seconds(a, b) -> float:
        return b - a
