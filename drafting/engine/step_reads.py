"""What the host reads of one step's logits, copied off the device in one transfer.

Greedy acceptance reads every tree row's argmax, the in-model drafters every row's argmax, the adjacency harvest
the tree rows' top-k and their softmax. On a GPU each read waits for the device, so reading them one after the
other is one wait each. Here they are computed on the device, packed into one tensor and copied to the host
together, the first time any of them is asked for; what is declared up front (``argmax``, ``top_k``) rides along
with that first read. On the CPU there is nothing to transfer, so each part is read as it is: packing them would
cost more than the reads (about 50 us a step).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from drafting.engine.fast_topk import row_argmax, row_topk


def transfers(device: torch.device) -> bool:
    """Whether reading ``device``'s tensors on the host is a transfer worth one packed copy (every device but the
    CPU; tests take the packed path on the CPU by replacing this)."""
    return device.type != "cpu"


class StepReads:
    """One step's host reads of ``logits`` (rows, vocab). ``argmax``: every row's argmax will be read;
    ``top_k``: the top-k of the first ``top_rows`` rows (default: all) will be read."""

    def __init__(self, logits: torch.Tensor, argmax: bool = False, top_k: int = 0, top_rows: int | None = None):
        self.logits = logits
        self._want_argmax = argmax
        self._want_top = (top_k, logits.shape[0] if top_rows is None else top_rows) if top_k else None
        self._argmax: list[int] | None = None
        self._top: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def argmax(self) -> list[int]:
        """Every row's argmax token (the first maximum on ties)."""
        if self._argmax is None:
            self._read(argmax=True, top=self._want_top if self._want_top not in self._top else None)
        return self._argmax

    def top(self, k: int, rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(tokens int32 (rows, k), probabilities float32 (rows, k)) of the first ``rows`` rows' ``k`` most likely
        tokens, best first; the probabilities are a softmax over those ``k`` only."""
        key = (k, self.logits.shape[0] if rows is None else rows)
        if key not in self._top:
            self._read(argmax=self._want_argmax and self._argmax is None, top=key)
        return self._top[key]

    def _read(self, argmax: bool, top: tuple[int, int] | None) -> None:
        with torch.no_grad(), one_cpu_thread(self.logits):
            best = row_argmax(self.logits) if argmax else None
            if top is not None:
                k, rows = top
                values, tokens = row_topk(self.logits[:rows], k)
                # a softmax over the top-k only: a full log-sum-exp would be another pass over rows x vocab
                probs = torch.softmax(values.float(), dim=-1)
        if not transfers(self.logits.device):  # already on the host: read each part as it is, nothing to pack
            if best is not None:
                self._argmax = best.tolist()
            if top is not None:
                self._top[top] = (tokens.numpy().astype(np.int32), probs.numpy())
            return
        parts = ([best.to(torch.float64)] if best is not None else []) + (
            [tokens.to(torch.float64).reshape(-1), probs.to(torch.float64).reshape(-1)] if top is not None else [])
        host = torch.cat(parts).cpu().numpy()  # the one transfer (float64 holds every token id exactly)
        at = 0
        if best is not None:
            at = self.logits.shape[0]
            self._argmax = host[:at].astype(np.int64).tolist()
        if top is not None:
            m = rows * k
            self._top[top] = (host[at : at + m].astype(np.int32).reshape(rows, k),
                              host[at + m : at + 2 * m].astype(np.float32).reshape(rows, k))


@contextmanager
def one_cpu_thread(t: torch.Tensor):
    """A top-k over a few rows is fastest on one thread: split across the cores of a busy machine, each op
    waits for every core, many times longer than the op itself (docs/measurements.md)."""
    threads = torch.get_num_threads()
    if t.device.type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
