"""Small integer lists (token ids, positions, tree visibility, compaction indices) copied to the model's device.

On CUDA a plain ``torch.tensor(values, device="cuda")`` copies from pageable memory and makes the host wait for
the GPU. Here the values go through a pinned host buffer and an asynchronous copy instead; the buffer is reused
step after step, so before refilling it the host waits only for its own previous copy (long done by then, since
every step ends with the acceptance decision reading the logits). On any other device (CPU, or an accelerator
such as ``mps`` or ``xpu`` that a library caller placed a model on) a plain tensor is made and copied there, so
the values always land on the device that was asked for.

A buffer belongs to one thread (``thread_staging``): two models stepping at once from two threads would
otherwise refill one buffer while the other's copy out of it is still queued. What is CUDA's own (page-locked
buffers, asynchronous copies, events) sits behind ``PinnedCopies``, which tests replace to run this path on the CPU.
"""

from __future__ import annotations

import threading

import numpy as np
import torch


class PinnedCopies:
    """The CUDA side of staging: which devices get pinned copies, the buffers, the copies and their events."""

    def pinned(self, device: torch.device) -> bool:
        return device.type == "cuda"

    def buffer(self, size: int) -> torch.Tensor:
        return torch.empty(size, dtype=torch.long, pin_memory=True)

    def copy(self, host: torch.Tensor, device: torch.device) -> torch.Tensor:
        return host.to(device, non_blocking=True)

    def new_event(self):
        return torch.cuda.Event()

    def record(self, event, device: torch.device) -> None:
        event.record(torch.cuda.current_stream(device))


class Staging:
    """One reusable pinned buffer, and one event fencing its last copy, per device, for host-to-device copies of
    int64 values. Not shared between threads (``thread_staging``)."""

    def __init__(self, copies: PinnedCopies | None = None):
        self.copies = copies or PinnedCopies()
        self._buf: dict = {}  # device -> (pinned buffer, event recorded after its last copy)

    def direct(self, device) -> bool:
        """Whether values for ``device`` are made where they are used, with no copy at all (the CPU)."""
        device = torch.device(device)
        return device.type == "cpu" and not self.copies.pinned(device)

    def to_device(self, values, device) -> torch.Tensor:
        """``values`` (a list or numpy array of ints, any shape) as a flat int64 tensor on ``device``."""
        device = torch.device(device)
        arr = np.asarray(values, dtype=np.int64).reshape(-1)
        if not self.copies.pinned(device):
            flat = torch.as_tensor(arr)
            return flat if device.type == "cpu" else flat.to(device)
        buf, event = self._buf.get(device, (None, None))
        if event is not None:
            event.synchronize()  # the previous copy out of this buffer must have been read before refilling it
        else:
            event = self.copies.new_event()  # made once per device, recorded again after every copy
        if buf is None or buf.numel() < arr.size:
            buf = self.copies.buffer(max(arr.size, 2 * (buf.numel() if buf is not None else 4096)))
        buf[: arr.size].copy_(torch.from_numpy(arr))
        out = self.copies.copy(buf[: arr.size], device)
        self.copies.record(event, device)
        self._buf[device] = (buf, event)
        return out


_local = threading.local()


def thread_staging() -> Staging:
    """This thread's staging buffers (made on its first copy)."""
    staging = getattr(_local, "staging", None)
    if staging is None:
        staging = _local.staging = Staging()
    return staging
