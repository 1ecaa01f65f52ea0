"""Forward-pass timing for the bench: separates the model's forward time from the rest of a step."""

from __future__ import annotations

import time

import torch

from drafting.engine.phase_clock import model_devices


class ForwardTimer:
    """Times every call of the model's forward (hooks on the top module).

    On one CUDA device each call records a start and an end event on the current stream and nothing waits: the
    host keeps running ahead (drafting while the GPU verifies), and ``take()`` reads the events once, when the
    caller is done with the forwards it times. A duration is the stream's time from the forward's first kernel
    slot to its last kernel, so queued work from before the call is not counted. A model spread over several
    devices cannot be timed by one stream's events, so there each call synchronises every device around it.
    On CPU a call costs two ``perf_counter()`` reads.
    """

    def __init__(self, model, device: torch.device):
        self.durations: list[float] = []
        # another engine's network on a GPU (llama.cpp's) times its own passes: no torch events for it
        on_cuda = device.type == "cuda" and isinstance(model, torch.nn.Module)
        self._devices = model_devices(model) if on_cuda else []
        self._events = len(self._devices) == 1
        self._pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._spare: list[torch.cuda.Event] = []  # events are reused: creating one costs more than recording it
        self._t0 = 0.0
        self._models: set[int] = set()
        self._handles: list = []
        self.also(model)

    def _event(self) -> "torch.cuda.Event":
        ev = self._spare.pop() if self._spare else torch.cuda.Event(enable_timing=True)
        ev.record(torch.cuda.current_stream(self._devices[0]))
        return ev

    def _pre(self, *_):
        if self._events:
            self._start = self._event()
            return
        for dev in self._devices:
            torch.cuda.synchronize(dev)
        self._t0 = time.perf_counter()

    def _post(self, *_):
        if self._events:
            self._pairs.append((self._start, self._event()))
            return
        for dev in self._devices:
            torch.cuda.synchronize(dev)
        self.durations.append(time.perf_counter() - self._t0)

    def also(self, model) -> None:
        """Time this model's forwards too (transformers' rows run on a second, unmodified instance); another
        engine's network (not a torch module) times its own passes, so nothing is hooked."""
        if id(model) in self._models or not isinstance(model, torch.nn.Module):
            return
        self._models.add(id(model))
        self._handles += [model.register_forward_pre_hook(self._pre), model.register_forward_hook(self._post)]

    def take(self) -> list[float]:
        """The durations (seconds) of the forwards since the last call; waits for the last one to finish."""
        if self._pairs:
            self._pairs[-1][1].synchronize()
            self.durations += [a.elapsed_time(b) / 1000.0 for a, b in self._pairs]
            self._spare += [ev for pair in self._pairs for ev in pair]
            self._pairs = []
        out, self.durations = self.durations, []
        return out

    def close(self) -> None:
        for h in self._handles:
            h.remove()
