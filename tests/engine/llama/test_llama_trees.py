"""One llama_decode over a draft tree (and in-model draft rows) scores every node as feeding its path one token at a
time would: the sequence-id tagging gives each node exactly its ancestors, never a sibling or a cousin."""

from __future__ import annotations

import pytest
import torch
from support.one_token import sequential

from drafting.engine.tree import Draft, DraftRows, DraftTree
from drafting.errors import EngineError

pytest.importorskip("llama_cpp")  # the engine is an extra: `make llamacpp-setup`

IDS = [100 + (i * 7919) % 30000 for i in range(80)]
PREFIX = 40


def _tree() -> DraftTree:
    """root -> a, b; a -> c, d; b -> e; c -> f: siblings and cousins at every depth."""
    t = DraftTree(IDS[PREFIX])
    a, b = t.add(IDS[41], 0, "x"), t.add(IDS[42], 0, "x")
    c = t.add(IDS[43], a, "x")
    t.add(IDS[44], a, "x")
    t.add(IDS[45], b, "x")
    t.add(IDS[46], c, "x")
    return t


@pytest.mark.parametrize("which", ["small_llama", "llama_lm"])
def test_a_tree_pass_matches_one_token_passes_node_by_node(which, request):
    lm = request.getfixturevalue(which)
    fwd, cache = prefilled(lm)
    tree = _tree()
    logits = fwd.step(Draft(tree=tree), cache).clone()
    fwd.crop(cache, PREFIX)  # a step never kept: its rows and borrowed sequences go
    assert cache.get_seq_length() == PREFIX and not cache.scratch
    for node in range(len(tree)):
        path = tree.path_to(node)
        ref = sequential(lm, cache, PREFIX, [tree.tokens[n] for n in path])[-1]
        # batched and one-token kernels may round differently on quantised weights (REFERENCE: up to ~0.7); the
        # F16 file rounds alike, and a node that saw a cousin would be off by whole logits
        tolerance = 0.05 if which == "small_llama" else 1.0
        assert float((ref - logits[node]).abs().max()) < tolerance, f"node {node} (path {path})"
        top2 = torch.topk(ref, 2).values
        if float(top2[0] - top2[1]) > 2 * tolerance:
            assert int(ref.argmax()) == int(logits[node].argmax())


def prefilled(lm):
    """A forward of ``lm`` and a cache holding the first PREFIX ids."""
    fwd = lm.make_forward(lm, None)
    cache = fwd.new_cache()
    fwd.prefill(IDS[:PREFIX], cache)
    return fwd, cache


def test_draft_rows_hang_from_the_tree_like_ptd_and_lookahead_rows(small_llama):
    """PTD's slots (a chain after the root, rows branching off it) and a row branching off a row: each row's logits
    are its own chain's, fed one token at a time."""
    lm = small_llama
    fwd, cache = prefilled(lm)
    tree = DraftTree(IDS[PREFIX])
    tree.add(IDS[41], 0, "x")
    t = len(tree)
    rows = DraftRows(tokens=[IDS[50], IDS[51], IDS[52], IDS[53]], offsets=[1, 2, 3, 2],
                     visible=[[0], [0, t], [0, t, t + 1], [0, t]])
    logits = fwd.step(Draft(tree=tree, rows=rows), cache).clone()
    fwd.crop(cache, PREFIX)
    chains = {t: [IDS[40], IDS[50]], t + 1: [IDS[40], IDS[50], IDS[51]], t + 2: [IDS[40], IDS[50], IDS[51], IDS[52]],
              t + 3: [IDS[40], IDS[50], IDS[53]], 1: [IDS[40], IDS[41]]}
    for row, chain in chains.items():
        ref = sequential(lm, cache, PREFIX, chain)[-1]
        assert float((ref - logits[row]).abs().max()) < 0.05, f"row {row}"


def test_a_row_sequence_ids_cannot_express_is_refused_in_one_sentence(small_llama):
    lm = small_llama
    fwd, cache = prefilled(lm)
    tree = DraftTree(IDS[PREFIX])
    tree.add(IDS[41], 0, "x")
    tree.add(IDS[42], 0, "x")
    # sees two siblings at once: no single chain of ancestors
    rows = DraftRows(tokens=[IDS[50]], offsets=[2], visible=[[0, 1, 2]])
    with pytest.raises(EngineError, match="one chain") as info:
        fwd.step(Draft(tree=tree, rows=rows), cache)
    assert "\n" not in str(info.value)
    fwd.crop(cache, PREFIX)
    assert cache.get_seq_length() == PREFIX and not cache.scratch


def test_a_draft_larger_than_a_pass_is_refused(small_llama):
    lm = small_llama
    fwd, cache = prefilled(lm)
    tree = DraftTree(IDS[PREFIX])
    tree.add_chain(list(range(200, 200 + lm.model.settings.batch)), 0, "x")
    with pytest.raises(EngineError, match="larger than a llama.cpp pass"):
        fwd.step(Draft(tree=tree), cache)
