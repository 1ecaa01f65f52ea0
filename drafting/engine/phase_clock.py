"""Phase timing that is right on GPUs: marks at phase boundaries, never around every kernel.

A CUDA call returns before its kernels run, so host timestamps put queued GPU work into whichever phase happens to
wait for it next (the prefill's work into step 1, a verify's compaction into the next step's drafting). On one
CUDA device each mark records an event on the current stream; the events are read once per step, when the step is
over, so the host still runs ahead of the GPU inside a step. Event times are the stream's own clock, which also
counts the host work the GPU waited for, so a phase is what it added to the step's wall time. A model spread over
several devices (``device_map``) gets a synchronize on every device at each mark instead: one stream cannot see
the others' work. On CPU a mark is ``time.perf_counter()`` and nothing else.

A clock makes its events once and records them again step after step (a step needs four): the first mark after a
``settle()`` takes back the events of the marks before it, so a mark is read after its own ``settle()`` and before
the clock's next mark (reading it later raises). What is CUDA's own (events, streams, synchronize) sits behind
``CudaTiming``, which tests replace to run the event path on the CPU.
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


class CudaTiming:
    """The CUDA side of the clock: timing events, the stream they are recorded on, a device's synchronize."""

    def new_event(self):
        return torch.cuda.Event(enable_timing=True)

    def stream(self, device: torch.device):
        return torch.cuda.current_stream(device)

    def synchronize(self, device: torch.device) -> None:
        torch.cuda.synchronize(device)


class StaleMark(RuntimeError):
    """A mark read after its clock's next round of marks began: its event has been recorded again since."""


class EventMark:
    """A CUDA event recorded at a phase boundary; ``b - a`` is the seconds between two marks, waiting for ``b``'s
    work if it has not finished (read marks after ``settle()`` to wait only once a step)."""

    __slots__ = ("event", "clock", "round")

    def __init__(self, event, clock: "PhaseClock"):
        self.event, self.clock, self.round = event, clock, clock.round

    def __sub__(self, earlier: "EventMark") -> float:
        if self.round != self.clock.round or earlier.round != self.clock.round:
            raise StaleMark("A phase mark was read after its clock's next mark; read marks before marking again.")
        self.event.synchronize()
        return earlier.event.elapsed_time(self.event) / 1000.0


class PhaseClock:
    """``mark()`` returns a mark (a float on CPU or a device map, an ``EventMark`` on one CUDA device); marks
    subtract to seconds. ``settle()`` waits for the last mark, once per phase boundary that needs the figures."""

    def __init__(self, devices: list[torch.device], cuda: CudaTiming | None = None):
        self.devices = list(devices)
        self.events = len(self.devices) == 1  # one stream sees every kernel of the step
        self.cuda = cuda or CudaTiming()
        self.round = 0  # marks since the last settle() share a round; a new round takes their events back
        self._free: list = []  # events made by this clock, free to be recorded again
        self._used: list = []  # events of this round's marks
        self._settled = False
        self._last = None

    @classmethod
    def for_model(cls, model: torch.nn.Module) -> "PhaseClock":
        return cls(model_devices(model))

    def mark(self):
        if self.events:
            if self._settled:  # the marks before settle() have been read: their events can be recorded again
                self._free.extend(self._used)
                self._used.clear()
                self.round += 1
                self._settled = False
            event = self._free.pop() if self._free else self.cuda.new_event()
            event.record(self.cuda.stream(self.devices[0]))
            self._used.append(event)
            self._last = EventMark(event, self)
            return self._last
        for dev in self.devices:  # a device map: wait for every device's queue
            self.cuda.synchronize(dev)
        return time.perf_counter()

    def settle(self) -> None:
        """Wait for the last mark's work to finish (a phase boundary: the end of a step or of the prefill)."""
        if self.events and self._last is not None:
            self._last.event.synchronize()
            self._settled = True

    @staticmethod
    def seconds(a, b) -> float:
        return b - a
