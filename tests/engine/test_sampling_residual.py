"""Unit tests of the sampling arithmetic: warping masks, the residual after rejections, the acceptor's walk."""

import math

import pytest
import torch

from drafting.engine.acceptance import TreeSampler, greedy_acceptor, make_acceptor, sibling_choice
from drafting.engine.sampling import sample, warp
from drafting.engine.sampling_params import SamplingParams
from drafting.engine.tree import DraftTree
from support.sampling_reference import reference_warp


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 3, 1.0), (0.9, 0, 0.6), (0.9, 4, 0.5), (2.0, 1, 1.0), (0.5, 0, 0.01)],
)
def test_sampling_warp_matches_reference(temperature, top_k, top_p):
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(12, generator=gen) * 2
    got = warp(logits, SamplingParams(temperature, top_k, top_p))
    want = torch.tensor(reference_warp(logits.tolist(), temperature, top_k, top_p), dtype=torch.float32)
    assert torch.allclose(got, want, atol=1e-6)
    assert abs(float(got.sum()) - 1.0) < 1e-5
    assert ((got > 0) == (want > 0)).all()


def test_sampling_top_k_mask_keeps_exactly_k_tokens():
    logits = torch.tensor([0.1, 3.0, -1.0, 2.0, 2.5, 0.0])
    p = warp(logits, SamplingParams(1.0, top_k=3))
    assert (p > 0).nonzero().flatten().tolist() == [1, 3, 4]
    assert torch.allclose(p[[1, 3, 4]], torch.softmax(logits[[1, 3, 4]], 0))


def test_sampling_top_p_mask_is_smallest_set_reaching_p():
    probs = torch.tensor([0.05, 0.4, 0.3, 0.2, 0.05])
    logits = probs.log()
    # 0.4 < 0.65, 0.4 + 0.3 >= 0.65: keep the two most likely tokens
    assert (warp(logits, SamplingParams(1.0, top_p=0.65)) > 0).nonzero().flatten().tolist() == [1, 2]
    # exactly reaching top_p stops there (0.4 + 0.3 + 0.2 = 0.9)
    assert (warp(logits, SamplingParams(1.0, top_p=0.9)) > 0).sum() == 3
    # the most likely token always stays
    assert (warp(logits, SamplingParams(1.0, top_p=0.01)) > 0).nonzero().flatten().tolist() == [1]


def test_sampling_top_p_large_vocab_fast_path_matches_full_sort():
    gen = torch.Generator().manual_seed(0)
    for scale, top_p in [(3.0, 0.9), (0.5, 0.95), (8.0, 0.5)]:  # nucleus inside 256, inside 1024, beyond both
        logits = torch.randn(5000, generator=gen) * scale
        got = warp(logits, SamplingParams(0.8, top_p=top_p))
        vals, idx = (logits / 0.8).sort(descending=True)
        probs = vals.softmax(0)
        vals = vals.masked_fill(probs.cumsum(0) - probs >= top_p, float("-inf"))
        want = torch.full_like(logits, float("-inf")).scatter(0, idx, vals).softmax(0)
        assert ((got > 0) == (want > 0)).all()
        assert torch.allclose(got, want, atol=1e-6)
    assert int((warp(torch.randn(5000, generator=gen) * 0.01, SamplingParams(1.0, top_p=0.9)) > 0).sum()) > 1024


def test_sampling_residual_excludes_rejected_siblings_and_sums_to_one():
    p = torch.tensor([0.1, 0.4, 0.2, 0.2, 0.1])
    children = torch.tensor([1, 3])
    first, residual = sibling_choice(p, children, torch.ones(2))  # u = 1 rejects every child
    assert int(first) == 2
    assert residual[children].eq(0).all()
    r = residual / residual.sum()
    assert torch.allclose(r, torch.tensor([0.1, 0.0, 0.2, 0.0, 0.1]) / 0.4)
    assert abs(float(r.sum()) - 1.0) < 1e-6


def test_sampling_residual_when_children_hold_all_mass_is_never_empty():
    p = torch.tensor([0.0, 0.7, 0.3])
    _, residual = sibling_choice(p, torch.tensor([1, 2]), torch.ones(2))
    assert float(residual.sum()) > 0  # sampling from it cannot fail (the branch is never taken in exact arithmetic)


def test_sampling_sibling_acceptance_probability_is_residual_ratio():
    # child j is accepted with r(x_j) = p(x_j) / (1 - mass of the siblings tried before it)
    p = torch.tensor([0.1, 0.4, 0.2, 0.3])
    children = torch.tensor([1, 3, 2])
    thresholds = [0.4 / 1.0, 0.3 / 0.6, 0.2 / 0.3]
    for j, t in enumerate(thresholds):
        below = torch.ones(3)
        below[j] = t - 1e-4
        above = torch.ones(3)
        above[j] = t + 1e-4
        assert int(sibling_choice(p, children, below)[0]) == j
        assert int(sibling_choice(p, children, above)[0]) == 3


def test_sampling_sibling_rule_gives_each_child_its_target_probability():
    # Over all uniforms, the chance of landing on child j is p(x_j) and the residual covers the rest: the walk
    # emits exactly p at this node.
    p = torch.tensor([0.15, 0.35, 0.25, 0.25])
    children = torch.tensor([1, 3, 2])
    gen = torch.Generator().manual_seed(1)
    n = 20000
    hits = torch.zeros(4)
    for u in torch.rand(n, 3, generator=gen):
        hits[int(sibling_choice(p, children, u)[0])] += 1
    want = torch.tensor([0.35, 0.25, 0.25, 0.15])
    assert torch.allclose(hits / n, want, atol=4 * math.sqrt(0.25 / n))


def test_sampling_cdf_draw_never_picks_zero_weight():
    w = torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0])
    for u in [0.0, 0.25, 0.5, 0.75, 1.0 - 1e-7, 1.0]:
        assert int(sample(w, torch.tensor([u]))) in (1, 3)
    assert int(sample(w, torch.tensor([0.49]))) == 1
    assert int(sample(w, torch.tensor([0.51]))) == 3


def _tree() -> DraftTree:
    tree = DraftTree(5)
    a = tree.add(1, 0, "context")
    tree.add(2, a, "context")
    tree.add(3, 0, "adjacency")
    return tree


def test_sampling_acceptor_follows_certain_path_and_ignores_draft_rows():
    tree = _tree()
    logits = torch.full((len(tree) + 3, 8), -30.0)
    logits[0, 1] = 30.0  # root: certainly token 1 (node 1)
    logits[1, 2] = 30.0  # node 1: certainly token 2 (node 2)
    logits[2, 6] = 30.0  # node 2: bonus certainly 6
    logits[len(tree):] = float("nan")  # in-model draft rows after the tree must not be read
    acc = make_acceptor(SamplingParams(0.8, seed=0))
    assert acc(tree, logits) == ([0, 1, 2], 6)


def test_sampling_acceptor_rejects_impossible_children():
    tree = _tree()
    logits = torch.zeros(len(tree), 8)
    logits[0, [1, 3]] = float("-inf")  # both children of the root impossible: residual sample, never 1 or 3
    acc = TreeSampler(SamplingParams(1.0, seed=0))
    for _ in range(50):
        path, token = acc(tree, logits)
        assert path == [0] and token not in (1, 3)


def test_sampling_acceptor_merges_duplicate_siblings():
    tree = DraftTree(5)
    a = tree.add(1, 0, "x")
    # a second copy of token 1 under the root, built by hand (DraftTree.add would reuse node a)
    tree.tokens.append(1)
    tree.parents.append(0)
    tree.depths.append(1)
    tree.sources.append("x")
    dup = len(tree) - 1
    b = tree.add(4, dup, "x")
    logits = torch.full((len(tree), 8), -30.0)
    logits[0, 1] = 30.0
    logits[a, 4] = 30.0
    logits[dup, 4] = 30.0  # same token, same position and ancestors: the same row as node a
    logits[b, 6] = 30.0
    # the duplicate's subtree hangs under the first copy, so its child (token 4) is reached through node a
    assert TreeSampler(SamplingParams(1.0, seed=0))(tree, logits) == ([0, a, b], 6)


def test_sampling_seed_reproducible_and_greedy_at_zero():
    tree = DraftTree(0)
    logits = torch.randn(1, 50)
    acc1, acc2 = make_acceptor(SamplingParams(1.0, seed=7)), make_acceptor(SamplingParams(1.0, seed=7))
    assert [acc1(tree, logits)[1] for _ in range(20)] == [acc2(tree, logits)[1] for _ in range(20)]
    acc3 = make_acceptor(SamplingParams(1.0, seed=8))
    assert [acc1(tree, logits)[1] for _ in range(20)] != [acc3(tree, logits)[1] for _ in range(20)]
    assert make_acceptor(SamplingParams(0.0, top_k=5, seed=1)) is greedy_acceptor


def test_sampling_params_reject_bad_values():
    for bad in [SamplingParams(-1.0), SamplingParams(1.0, top_k=-1), SamplingParams(1.0, top_p=0.0), SamplingParams(1.0, top_p=1.5)]:
        with pytest.raises(ValueError):
            make_acceptor(bad)
    assert SamplingParams(0.7, top_k=50, top_p=0.9, seed=1).describe() == "T=0.7 top-k=50 top-p=0.9 seed=1"


@pytest.mark.slow
def test_sampling_on_embedded_model_repeats_with_seed_and_follows_the_nucleus(embedded_lm, real_prompts):
    """Real vocabulary (49k tokens, the top-p fast path): a seed repeats a sampled answer exactly, and with a
    tiny top-p every token is the target's argmax, so the sampled answer equals greedy decoding."""
    from drafting.engine.decode import Decoder
    from drafting.speculators import create

    _, ids = real_prompts[0]
    run = lambda params: Decoder(embedded_lm, create("pld"), acceptor=make_acceptor(params)).generate(ids, 24).output_ids
    first = run(SamplingParams(0.7, seed=5))
    assert first == run(SamplingParams(0.7, seed=5))
    assert run(SamplingParams(1.0, top_p=1e-6, seed=1)) == run(SamplingParams(0.0))
