"""Per-row argmax and top-k over vocabulary-wide logits, fast on CPU.

torch's CPU ``argmax`` and ``topk`` over a row of ~50k logits do not vectorise: on a 2-core machine an argmax of
16 rows costs three times ``max(dim)`` and a top-10 four times the blocked search below (docs/measurements.md).
Both run every step (the greedy acceptor, the adjacency harvest), so the difference is a few percent of a step.

``row_argmax`` is ``max(dim).indices``: torch documents it, like ``argmax``, to return the first maximal index,
so the tokens are the same, ties included. ``row_topk`` finds the row's best blocks of ``BLOCK`` logits by their
maxima (a vectorised pass), then takes the top-k among those blocks only: every one of a row's k largest values
lies in one of the k blocks with the largest maxima, so the values equal ``torch.topk``'s (indices may differ
only between equal values).
"""

from __future__ import annotations

import numpy as np
import torch

BLOCK = 64
FEW = 4  # up to this k, repeated numpy argmax over a copy beats the blocked search (a top-2 margin every step)
_IN_BLOCK = torch.arange(BLOCK)  # offsets within a block, made once (the blocked path runs on CPU only)


def row_argmax(logits: torch.Tensor) -> torch.Tensor:
    """Index of each row's maximum (the first one on ties), like ``logits.argmax(-1)``. float32 rows on the CPU go
    through numpy's vectorised argmax (also the first maximum): a ~50k-logit row takes a few microseconds there
    against 70-130 in torch on a 2-core machine, which is half a percent of a 14 ms llama.cpp step."""
    if logits.device.type == "cpu" and logits.dtype == torch.float32:
        return torch.from_numpy(logits.detach().numpy().argmax(-1))
    return logits.max(-1).indices


def row_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of each row's ``k`` largest logits, largest first, like ``torch.topk(logits, k)``;
    ``logits`` is (rows, vocab)."""
    rows, vocab = logits.shape
    if k <= FEW and logits.device.type == "cpu" and logits.dtype == torch.float32:
        return _few_largest(logits, k)
    blocks = vocab // BLOCK
    if logits.device.type != "cpu" or blocks < 4 * k:  # GPU top-k is fast already; tiny vocabularies too
        return torch.topk(logits, k, dim=-1)
    body = logits[:, : blocks * BLOCK].unflatten(1, (blocks, BLOCK))
    best = body.amax(-1).topk(k, dim=-1).indices
    cols = (best.unsqueeze(-1) * BLOCK + _IN_BLOCK).reshape(rows, k * BLOCK)
    if blocks * BLOCK < vocab:  # the tail that fills no whole block is always searched
        cols = torch.cat([cols, torch.arange(blocks * BLOCK, vocab).expand(rows, -1)], dim=-1)
    values, at = logits.gather(1, cols).topk(k, dim=-1)
    return values, cols.gather(1, at)


def _few_largest(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``row_topk`` for a small ``k`` on CPU float32: k vectorised argmax passes over a copy, each removing the
    maximum it found (the first one on ties, as argmax)."""
    work = logits.detach().numpy().copy()
    index = np.empty((work.shape[0], k), dtype=np.int64)
    value = np.empty((work.shape[0], k), dtype=np.float32)
    rows = np.arange(work.shape[0])
    for j in range(k):
        at = work.argmax(-1)
        index[:, j], value[:, j] = at, work[rows, at]
        work[rows, at] = -np.inf
    return torch.from_numpy(value), torch.from_numpy(index)
