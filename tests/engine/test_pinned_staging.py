"""The pinned staging path that step inputs and cache compaction take on CUDA, run on the CPU through a stand-in
for CUDA's own parts (``PinnedCopies``): it must give what the CPU path gives, never hand out a tensor that a
later refill of the buffer changes, wait for its previous copy before refilling, make its event once, and keep
one buffer per thread."""

from __future__ import annotations

import random
import threading

import torch

from drafting.engine.hf.forward import HFForward, keep_accepted
from drafting.engine.hf.pinned import PinnedCopies, Staging, thread_staging
from drafting.engine.hf.step_inputs import step_inputs
from drafting.engine.tree import Draft, DraftRows, DraftTree


class FakeEvent:
    def __init__(self, log: list):
        self.log = log

    def record(self, stream=None):
        self.log.append("record")

    def synchronize(self):
        self.log.append("synchronize")


class CpuAsCuda(PinnedCopies):
    """Every device, the CPU included, takes the pinned path; a copy is a real copy, as a host-to-device one is
    (the CPU's own ``.to("cpu")`` would hand back the buffer itself)."""

    def __init__(self):
        self.log: list = []
        self.events = 0

    def pinned(self, device):
        return True

    def buffer(self, size):
        self.log.append(f"buffer {size}")
        return torch.empty(size, dtype=torch.long)

    def copy(self, host, device):
        self.log.append("copy")
        return host.clone()

    def new_event(self):
        self.events += 1
        return FakeEvent(self.log)

    def record(self, event, device):
        event.record()


def test_the_pinned_path_gives_what_the_cpu_path_gives_and_never_aliases_its_buffer():
    copies = CpuAsCuda()
    staging = Staging(copies)
    assert not staging.direct("cpu") and Staging().direct("cpu")
    first = staging.to_device([[3, 1], [4, 1]], "cpu")
    second = staging.to_device([5, 9, 2], "cpu")
    assert first.tolist() == [3, 1, 4, 1] and second.tolist() == [5, 9, 2]  # the refill left the first alone
    assert first.dtype == second.dtype == torch.long
    assert copies.events == 1  # one event per device, recorded again after every copy
    assert copies.log == ["buffer 8192", "copy", "record", "synchronize", "copy", "record"]
    big = staging.to_device(list(range(9000)), "cpu")
    assert big.tolist() == list(range(9000)) and copies.log[-4:] == ["synchronize", "buffer 16384", "copy", "record"]


def _draft() -> Draft:
    tree = DraftTree(5)
    a = tree.add(6, 0, "context")
    tree.add(7, 0, "adjacency")
    tree.add(8, a, "context")
    rows = DraftRows(tokens=[9, 10], offsets=[1, 2], visible=[[0], [0, 1]])
    return Draft(tree=tree, rows=rows)


def test_step_inputs_through_the_pinned_path_equal_the_cpu_path(tiny_lm):
    layout = HFForward(tiny_lm.model, tiny_lm.dtype, "cpu").layout
    chain = DraftTree(5)
    chain.add(6, 0, "context")
    for draft in (_draft(), Draft(tree=_draft().tree), Draft(tree=chain)):
        direct = step_inputs(draft, 4, torch.float32, "cpu", layout)
        staged = step_inputs(draft, 4, torch.float32, "cpu", layout, staging=Staging(CpuAsCuda()))
        for want, got in zip(direct, staged):
            assert (want is None) == (got is None)
            if want is not None:
                assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


def test_cache_compaction_through_the_pinned_path_equals_the_cpu_path(tiny_lm):
    fwd = HFForward(tiny_lm.model, tiny_lm.dtype, "cpu")
    rng = random.Random(0)
    prefix = [rng.randrange(2, 120) for _ in range(9)]
    tree = _draft().tree
    caches = []
    for _ in range(2):
        cache = fwd.new_cache()
        fwd.prefill(prefix, cache)
        fwd.step(Draft(tree=tree), cache)
        caches.append(cache)
    keep_accepted(caches[0], len(prefix), [0, 2])
    keep_accepted(caches[1], len(prefix), [0, 2], staging=Staging(CpuAsCuda()))
    for plain, staged in zip(caches[0].layers, caches[1].layers):
        assert torch.equal(plain.keys[:, :, : len(prefix) + 2], staged.keys[:, :, : len(prefix) + 2])
        assert torch.equal(plain.values[:, :, : len(prefix) + 2], staged.values[:, :, : len(prefix) + 2])
    assert caches[0].get_seq_length() == caches[1].get_seq_length() == len(prefix) + 2


def test_each_thread_has_its_own_staging_buffers():
    seen = {}

    def note(name):
        seen[name] = thread_staging()

    threads = [threading.Thread(target=note, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["a"] is not seen["b"]
    assert thread_staging() is thread_staging() and thread_staging() not in seen.values()
