"""Small integer lists (token ids, positions, tree visibility, compaction indices) copied to the model's device.

On CUDA a plain ``torch.tensor(values, device="cuda")`` copies from pageable memory and makes the host wait for
the GPU. Here the values go through a pinned host buffer and an asynchronous copy instead; the buffer is reused
step after step, so before refilling it the host waits only for its own previous copy (long done by then, since
every step ends with the acceptance decision reading the logits). On any other device (CPU, or an accelerator
such as ``mps`` or ``xpu`` that a library caller placed a model on) a plain tensor is made and copied there, so
the values always land on the device that was asked for.
"""

from __future__ import annotations

import numpy as np
import torch


class Staging:
    """One reusable pinned buffer per device for host-to-device copies of int64 values."""

    def __init__(self):
        self._buf: dict = {}  # device -> (pinned buffer, event of its last copy)

    def to_device(self, values, device) -> torch.Tensor:
        """``values`` (a list or numpy array of ints, any shape) as a flat int64 tensor on ``device``."""
        device = torch.device(device)
        if device.type != "cuda":
            flat = torch.as_tensor(np.asarray(values, dtype=np.int64).reshape(-1))
            return flat if device.type == "cpu" else flat.to(device)
        arr = np.asarray(values, dtype=np.int64).reshape(-1)
        buf, event = self._buf.get(device, (None, None))
        if event is not None:
            event.synchronize()  # the previous copy out of this buffer must have been read before refilling it
        if buf is None or buf.numel() < arr.size:
            buf = torch.empty(max(arr.size, 2 * (buf.numel() if buf is not None else 4096)), dtype=torch.long,
                              pin_memory=True)
        buf.numpy()[: arr.size] = arr
        out = buf[: arr.size].to(device, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(device))
        self._buf[device] = (buf, event)
        return out
