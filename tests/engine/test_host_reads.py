"""Host reads per decoding step stay a small constant, whatever the tree size.

On a GPU every read of device data by the host (``.tolist()``, ``.cpu()``, ``.item()``, ``int(t)``, ...) waits
for the device's queue to drain, so a read per tree node makes a 60-node step wait 60 times. Here the reads
goose's own code makes are counted, step by step, on the CPU (tests/support/host_reads.py), for goose and PTD at
budgets 8 and 60; both budgets are held to the same bound.
"""

from __future__ import annotations

import pytest

from drafting.engine import step_reads
from drafting.engine.acceptance import make_acceptor
from drafting.engine.decode import Decoder
from drafting.engine.sampling_params import SamplingParams
from drafting.speculators import create
from support.host_reads import counting_host_reads

# A greedy step reads its logits once (drafting.engine.step_reads: every row's argmax and the tree rows' top-k,
# packed into one tensor): its .cpu() and .numpy() are 2 calls; on the CPU row_argmax also takes numpy's view of
# the logits (.numpy(), 1 call; on a GPU it is a device op). One copy off the device, 3 calls on the CPU.
GREEDY_READS_PER_STEP = 3
# A sampled step also decides its tree node by node, one read per node the walk visits (len(record.accepted):
# the accepted nodes, root included, the last of them deciding the bonus token), and its children's tokens go to
# the device once (.to(device), 1 call).
SAMPLED_READS_PER_STEP = GREEDY_READS_PER_STEP + 1

SPECS = ["goose:budget=8", "goose:budget=60", "ptd:rows=8", "ptd:rows=60"]
PROMPT = [5, 6, 7, 8, 9, 10, 11, 12] * 6  # repeats: the context source drafts long chains, the trees fill up


@pytest.fixture(autouse=True)
def as_on_a_gpu(monkeypatch):
    """The logits are read as they are off a GPU (one packed copy), not as the CPU reads them in place."""
    monkeypatch.setattr(step_reads, "transfers", lambda device: True)


def _reads_per_step(lm, spec: str, acceptor=None, tokens: int = 40) -> list[tuple[int, object]]:
    """(host reads, step record) of every step after the first (the first one also prefills)."""
    steps = iter(Decoder(lm, create(spec), acceptor=acceptor).run(PROMPT, tokens))
    next(steps)
    out = []
    while True:
        with counting_host_reads() as counts:
            record = next(steps, None)
        if record is None:
            return out
        out.append((sum(counts.values()), record, counts))


@pytest.mark.parametrize("spec", SPECS)
def test_a_greedy_step_reads_the_host_a_fixed_number_of_times(tiny_lm, spec):
    steps = _reads_per_step(tiny_lm, spec)
    assert len(steps) > 3
    if spec.endswith("60"):  # the larger budget does draft larger trees here
        assert max(len(r.tokens) for _, r, _ in steps) > 8
    for reads, record, counts in steps:
        assert reads <= GREEDY_READS_PER_STEP, f"step {record.step} ({len(record.tokens)} nodes): {dict(counts)}"


@pytest.mark.parametrize("spec", ["goose:budget=8", "goose:budget=60", "ptd:rows=60"])
def test_a_sampled_step_reads_once_per_node_it_visits_not_per_tree_node(tiny_lm, spec):
    acceptor = make_acceptor(SamplingParams(temperature=0.3, seed=1))
    steps = _reads_per_step(tiny_lm, spec, acceptor)
    assert len(steps) > 3
    for reads, record, counts in steps:
        bound = SAMPLED_READS_PER_STEP + len(record.accepted)
        assert reads <= bound, f"step {record.step} ({len(record.tokens)} nodes): {dict(counts)}"
