"""Lookahead and PTD mechanics on the tiny random model: window slides, growth, pruning, budgets, records."""

import json
import random

import pytest
import torch

from drafting.budget.online import OnlineBudget
from drafting.machine.cost_curve import CostCurve
from drafting.engine.decode import Decoder
from drafting.errors import SpecError
from drafting.speculators import create
from drafting.engine.speculator import StepResult
from drafting.engine.tree import Draft, DraftTree

# the cost measured on this CPU for the embedded model (seconds per forward by rows)
CPU_CURVE = CostCurve(sizes=[1, 2, 8, 16, 32, 64, 128], seconds=[0.038, 0.061, 0.064, 0.077, 0.105, 0.160, 0.273])


def _prompts(n=3):
    rng = random.Random(1)
    return [[rng.randrange(1, 120) for _ in range(rng.randrange(5, 40))] for _ in range(n)]


@pytest.mark.parametrize(
    "spec",
    ["lookahead", "lookahead:w=3,n=3,g=2,rows=12", "ptd", "ptd:rows=3", "ptd:rows=64,window=6,nodes=64,depth=3,width=2",
     "ptd:seed=off,rows=24"],
)
def test_matches_plain_decoding_on_tiny_model(flat_tiny_lm, spec):
    ar = Decoder(flat_tiny_lm, create("ar"))
    dec = Decoder(flat_tiny_lm, create(spec))
    drafted = 0
    for p in _prompts():
        res = dec.generate(p, 40)
        assert res.output_ids == ar.generate(p, 40).output_ids
        drafted += sum(1 for r in res.records if r.rows)
        for r in res.records:
            json.dumps(r.to_dict())  # records stay JSON-able (viz, traces)
    assert drafted > 0  # draft rows really rode along


def _fake_step(spec, draft, row_argmax, emitted, vocab=128):
    """Feed ``observe`` logits whose draft rows have the given argmaxes (the tree rows predict ``emitted``)."""
    t = len(draft.tree)
    logits = torch.zeros(draft.size, vocab)
    for r, tok in enumerate(row_argmax):
        logits[t + r, tok] = 1.0
    spec.observe(draft, StepResult(logits=logits, accepted=[0], emitted=emitted, prefix_len=10))


def test_ptd_window_slides_grows_and_prunes():
    spec = create("ptd:rows=32,window=3,seed=off")
    spec.eos = {127}
    ctx = [10, 11, 12, 13, 14, 15]
    spec.reset(ctx)
    assert len(spec.slots) == 2 and all(len(s.children) == 1 for s in spec.slots)  # two depth-2 chains
    d = spec.propose(ctx)
    desc = d.info["rows"]
    assert desc["parents"][:2] == [-1, -1] and desc["depths"] == [1, 1, 2, 2]
    assert d.rows.visible[1] == [0, len(d.tree)]  # slot 1 sees the root and slot 0
    # rows: slot0, slot1, child of slot0, child of slot1; argmaxes: slot0 -> slot1's token (the chain itself),
    # slot1 -> 50 (new slot), the children -> 60 and EOS (nothing grows under EOS)
    s0, s1 = spec.slots
    _fake_step(spec, d, [s1.token, 50, 60, 127], emitted=[20])
    assert [s.token for s in spec.slots] == [s0.token, s1.token, 50]
    assert len(s0.children) == 1 and [c.token for c in s0.children[0].children] == [60]
    assert d.info["rows"]["grown"] == [[2, 60], [-1, 50]]
    assert d.info["rows"]["pruned"] == []
    # the pool now holds the chain after slot 0 and its subtree
    assert [s1.token, 50] in spec.pool.get(s0.token).paths()
    # next step: the chain grows to 4 slots, past the window of 3: the oldest slot and its subtree go
    d = spec.propose(ctx + [20])
    n = len(d.rows)
    _fake_step(spec, d, [spec.slots[1].token, spec.slots[2].token, 70] + [5] * (n - 3), emitted=[21])
    assert [s.token for s in spec.slots] == [s1.token, 50, 70]
    pruned = d.info["rows"]["pruned"]
    assert 0 in pruned and all(d.info["rows"]["slot"][r] == 0 for r in pruned)


def test_ptd_depth_window_cuts_a_deep_slot_to_its_first_child():
    spec = create("ptd:rows=64,window=2,depth=2,width=4,seed=off")
    ctx = [3, 4, 5, 6]
    spec.reset(ctx)
    spec.slots = spec.slots[:1]
    slot = spec.slots[0]
    first = slot.children[0]
    d = spec.propose(ctx)
    # the slot (the chain end) proposes a new slot; its child grows a grandchild: height 3 > depth 2, so the
    # slot is cut to its first child's subtree
    _fake_step(spec, d, [40, 41], emitted=[7])
    assert spec.slots[0] is first and first.parent is None and first.depth == 1
    assert [c.token for c in first.children] == [41] and first.children[0].depth == 2
    assert [s.token for s in spec.slots] == [first.token, 40]
    assert d.info["rows"]["pruned"] == [0]  # the old slot row is gone, its first child lives on


def test_ptd_width_keeps_at_most_width_children_latest_first():
    spec = create("ptd:rows=64,window=3,width=2,seed=off")
    ctx = [3, 4, 5, 6]
    spec.reset(ctx)
    for tok in (30, 31, 32):
        d = spec.propose(ctx)
        # slot 0's argmax changes each step: it grows alternatives, the oldest cut beyond the width
        argmax = [tok, 9] + [1] * (len(d.rows) - 2)
        _fake_step(spec, d, argmax, emitted=[1])
        spec.slots = spec.slots[:2]  # keep the same two slots for the next step
    assert [c.token for c in spec.slots[0].children] == [32, 31]


def test_lookahead_columns_slide_and_feed_the_pool():
    spec = create("lookahead:w=2,n=3,g=7,rows=32,seed=off")
    ctx = [3, 4, 5, 6]
    spec.reset(ctx)
    spec.columns = [[10], [20]]
    d = spec.propose(ctx)
    _fake_step(spec, d, [11, 21], emitted=[1])  # warm-up: a second level appears
    assert spec.columns == [[10, 11], [20, 21]]
    d = spec.propose(ctx + [1])
    assert d.info["rows"]["level"] == [0, 0, 1, 1]
    assert d.rows.offsets == [1, 2, 2, 3]
    t = len(d.tree)
    assert d.rows.visible[3] == [0, t, t + 1]  # column 1, level 1: root, level 0 of columns 0..1
    _fake_step(spec, d, [0, 0, 12, 22], emitted=[1])  # full columns: n-grams out, columns slide
    assert spec.columns == [[11, 12], [21, 22]]
    assert spec.pool.get(10) == [(11, 12)] and spec.pool.get(20) == [(21, 22)]
    d = Draft(tree=DraftTree(10))
    tree = spec.propose(ctx + [10]).tree
    assert tree.tokens[:3] == [10, 11, 12]  # the pool's n-gram for the root is verified


def test_ptd_auto_verifies_only_the_guesses_that_pay():
    from drafting.machine.cost_curve import PrefixCost
    from drafting.speculators.ptd import guess_key

    text = [5, 6, 7, 8, 9, 10, 11]
    ptd = create("ptd")
    ptd.cost = PrefixCost(CPU_CURVE)  # as bind() sets it: the steep CPU curve
    ptd.reset(text)  # seeds the pool: 6 -> 7 8 9, ...
    assert ptd.propose(text + [99]).info["route"] == "plain"  # nothing known after 99
    # fresh estimates (0.3 for a first guess) do not pay for 1.6x the cost of a one-row step
    assert ptd.propose(text + [6]).info["route"] == "plain"
    for _ in range(40):  # the target took every first and second guess so far
        ptd.acceptance.update(guess_key(1, 0), True)
        ptd.acceptance.update(guess_key(2, 0), True)
        ptd.acceptance.update(guess_key(3, 0), True)
    draft = ptd.propose(text + [6])
    assert draft.info["route"] == "tree" and draft.tree.tokens[1:4] == [7, 8, 9]
    assert draft.info["draft_rows"] >= 1  # the forest rides along
    # a step whose guesses were tested updates the estimates: a rejected first guess lowers it
    before = ptd.acceptance.estimate(guess_key(1, 0), 0.3)
    logits = torch.zeros(draft.size, 128)
    logits[0, 50] = 1.0  # the target wanted 50, not the guess 7
    ptd.observe(draft, StepResult(logits=logits, accepted=[0], emitted=[50], prefix_len=len(text)))
    assert ptd.acceptance.estimate(guess_key(1, 0), 0.3) < before


def test_rows_option_checks():
    with pytest.raises(SpecError):
        create("ptd:rows=0")
    with pytest.raises(SpecError):
        create("ptd:rows=lots")
    assert create("ptd:rows=auto").settings.rows == "auto"
    assert create("lookahead").options["rows"].help


def test_online_budget_falls_back_to_plain_when_rows_do_not_pay():
    b = OnlineBudget(CPU_CURVE, (8, 16, 32), probe_every=12)
    used = []
    for _ in range(200):
        n = b.choose()
        used.append(n)
        b.update(n, {8: 1.3, 16: 1.6, 32: 2.0}.get(n, 1))  # below the cost ratios 1.68 / 2.03 / 2.76
    assert b.best() == 1
    assert used[-100:].count(1) > 85  # mostly plain, with rare probes


def test_online_budget_picks_the_size_that_pays():
    b = OnlineBudget(CPU_CURVE, (8, 16, 32))
    for _ in range(100):
        n = b.choose()
        b.update(n, {8: 2.0, 16: 3.0, 32: 3.2}.get(n, 1))  # 16 rows: 3.0 / 2.03 beats 2.0 / 1.68
    assert b.best() == 16
