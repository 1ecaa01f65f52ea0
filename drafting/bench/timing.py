"""Forward-pass timing for the bench: separates the model's forward time from the rest of a step."""

from __future__ import annotations

import time

import torch


class ForwardTimer:
    """Times every call of the model's forward (hooks on the top module). On CUDA it synchronises around each
    call, so a duration is the kernel time and not only the launch."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.durations: list[float] = []
        self._sync = device.type == "cuda"
        self._t0 = 0.0
        self._handles = [
            model.register_forward_pre_hook(self._pre),
            model.register_forward_hook(self._post),
        ]

    def _pre(self, *_):
        if self._sync:
            torch.cuda.synchronize()
        self._t0 = time.perf_counter()

    def _post(self, *_):
        if self._sync:
            torch.cuda.synchronize()
        self.durations.append(time.perf_counter() - self._t0)

    def take(self) -> list[float]:
        out, self.durations = self.durations, []
        return out

    def close(self) -> None:
        for h in self._handles:
            h.remove()
