"""A step's host reads of its logits: read in place on the CPU, packed into one copy off any other device; both
ways give the same argmax and top-k, and what is declared up front comes with the first read."""

from __future__ import annotations

import numpy as np
import torch

from drafting.engine import step_reads
from drafting.engine.step_reads import StepReads


def _logits() -> torch.Tensor:
    torch.manual_seed(0)
    logits = torch.randn(7, 300)
    logits[3, [10, 20]] = 50.0  # a tie: the first maximum wins
    return logits


def _both(logits, k: int, rows: int):
    reads = StepReads(logits, argmax=True, top_k=k, top_rows=rows)
    return reads.argmax(), *reads.top(k, rows), reads


def test_packed_and_in_place_reads_agree_and_are_right(monkeypatch):
    logits = _logits()
    in_place = _both(logits, 4, 5)
    monkeypatch.setattr(step_reads, "transfers", lambda device: True)
    packed = _both(logits, 4, 5)
    assert in_place[0] == packed[0] == [int(logits[i].argmax()) for i in range(7)]
    assert in_place[0][3] == 10
    values, tokens = torch.topk(logits[:5], 4)
    for tok, probs in (in_place[1:3], packed[1:3]):
        assert tok.dtype == np.int32 and probs.dtype == np.float32 and tok.shape == probs.shape == (5, 4)
        assert (tok == tokens.numpy()).all()
        assert np.allclose(probs, torch.softmax(values, -1).numpy(), atol=1e-6)


def test_what_is_declared_comes_with_the_first_read(monkeypatch):
    monkeypatch.setattr(step_reads, "transfers", lambda device: True)
    reads = StepReads(_logits(), argmax=True, top_k=4, top_rows=5)
    calls = []
    real = reads._read
    monkeypatch.setattr(reads, "_read", lambda *a, **kw: (calls.append(a), real(*a, **kw)))
    reads.argmax()
    reads.top(4, 5)
    reads.argmax()
    assert len(calls) == 1  # one transfer for both
    reads.top(2, 3)  # not declared: a read of its own
    assert len(calls) == 2
