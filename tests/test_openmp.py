"""Releasing the calling thread's idle OpenMP workers (what the chat app does before decoding off its main thread)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from drafting.openmp import release_idle_workers


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not sys.platform.startswith("linux") or torch.get_num_threads() < 2,
                    reason="needs Linux and torch running more than one thread")
def test_release_lets_the_workers_go_and_torch_still_runs():
    a = torch.randn(256, 256)
    (a @ a).sum()  # a parallel region: this thread's OpenMP team now exists
    before = _threads()
    assert release_idle_workers()
    assert _threads() < before
    expected = a.double() @ a.double()
    assert torch.allclose((a @ a).double(), expected, rtol=1e-4, atol=1e-3)  # the team comes back when needed
