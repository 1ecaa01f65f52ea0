"""The adjacency table (harvest, bigram tier, persistence) and GOOSE's context matcher, on hand-computed cases."""

import math

import pytest
import torch

from drafting.sources.adjacency import AdjacencyCacheError, AdjacencyTable
from drafting.sources.context import ContextIndex, SpineMatcher, match_confidence
from drafting.engine.tree import DraftTree

V = 16


def row(pairs: dict[int, float]) -> torch.Tensor:
    """Logits of one row: the given tokens get the given logits, everything else -30."""
    x = torch.full((V,), -30.0)
    for t, v in pairs.items():
        x[t] = v
    return x


def test_harvest_keeps_top_k_with_topk_softmax_scores():
    table = AdjacencyTable(k=2)
    table.harvest([5], [-1], row({3: 2.0, 7: 1.0, 9: 0.5})[None])
    succ, score = table.successors(-1, 5)
    assert succ.tolist() == [3, 7]
    e = math.exp(1.0)
    assert score.tolist() == pytest.approx([e / (e + 1), 1 / (e + 1)], rel=1e-5)
    assert table.successors(-1, 4)[0].tolist() == []  # never seen
    assert len(table) == 1


def test_later_harvest_overwrites_and_bigram_tier_is_consulted_first():
    table = AdjacencyTable(k=2)
    # prefill "1 5 2 5": row i predicts the token after ids[i]; 5 is seen after 1 and after 2
    ids = [1, 5, 2, 5]
    logits = torch.stack([row({5: 3.0, 0: 1.0}), row({2: 3.0, 8: 1.0}), row({5: 3.0, 0: 1.0}), row({6: 3.0, 4: 1.0})])
    table.harvest_prefill(ids, logits)
    assert table.successors(1, 5)[0].tolist() == [2, 8]  # bigram (1, 5)
    assert table.successors(2, 5)[0].tolist() == [6, 4]  # bigram (2, 5)
    assert table.successors(9, 5)[0].tolist() == [6, 4]  # unknown pair: the latest unigram row
    assert table.successors(1, 5, use_bigram=False)[0].tolist() == [6, 4]
    flat = AdjacencyTable(k=2, bigram=False)
    flat.harvest_prefill(ids, logits)
    assert flat.successors(1, 5)[0].tolist() == [6, 4]


def test_tree_rows_are_keyed_by_node_token_and_parent_token():
    table = AdjacencyTable(k=1)
    tree = DraftTree(4)  # root 4, preceded by context token 9
    a = tree.add(6, 0, "x")
    tree.add(7, a, "x")  # node 2: 7 under 6
    tree.add(8, 0, "x")  # node 3: 8 under the root (a rejected sibling: still harvested)
    logits = torch.stack([row({1: 1.0}), row({2: 1.0}), row({3: 1.0}), row({10: 1.0})])
    table.harvest_tree(tree, 9, logits)
    assert table.successors(9, 4)[0].tolist() == [1]
    assert table.successors(4, 6)[0].tolist() == [2]
    assert table.successors(6, 7)[0].tolist() == [3]
    assert table.successors(4, 8)[0].tolist() == [10]
    assert table.successors(-1, 8)[0].tolist() == [10]


def test_prefill_harvest_of_the_last_positions_only():
    table = AdjacencyTable(k=2)
    table.harvest_prefill([1, 5, 2], torch.stack([row({2: 2.0, 8: 1.0}), row({3: 2.0, 4: 1.0})]))  # logits of 5, 2
    assert table.successors(-1, 1)[0].tolist() == []
    assert table.successors(1, 5)[0].tolist() == [2, 8]
    assert table.successors(5, 2)[0].tolist() == [3, 4]


def test_save_and_load_round_trip(tmp_path):
    table = AdjacencyTable(k=2)
    table.harvest_prefill([1, 5, 2], torch.stack([row({5: 2.0, 0: 1.0}), row({2: 2.0, 8: 1.0}), row({3: 2.0, 4: 1.0})]))
    path = tmp_path / "adj.npz"
    table.save(path)
    back = AdjacencyTable(k=2)
    back.load(path)
    for prev, tok in [(-1, 1), (1, 5), (5, 2), (-1, 2)]:
        assert back.successors(prev, tok)[0].tolist() == table.successors(prev, tok)[0].tolist()
        assert back.successors(prev, tok)[1].tolist() == table.successors(prev, tok)[1].tolist()
    with pytest.raises(AdjacencyCacheError):
        AdjacencyTable(k=3).load(path)
    (tmp_path / "junk.npz").write_text("not a table")
    with pytest.raises(AdjacencyCacheError):
        AdjacencyTable(k=2).load(tmp_path / "junk.npz")


@pytest.mark.parametrize(
    "length, consensus, expected",
    [(0, False, 0.0), (0, True, 0.0), (4, False, 0.3), (7, False, 0.525), (8, False, 0.7), (14, False, 0.8),
     (20, False, 0.9), (60, False, 0.9), (3, True, 1.0)],
)
def test_confidence_rule(length, consensus, expected):
    assert match_confidence(length, consensus) == pytest.approx(expected)


def test_matcher_prefers_longest_ngram_and_detects_consensus():
    m = SpineMatcher(chain=20)
    # "1 2 3 4" occurs twice, both times followed by 5: consensus on the 4-gram ending the text
    m.reset([1, 2, 3, 4, 5, 9, 1, 2, 3, 4, 5, 8, 1, 2, 3, 4])
    s = m.spine(extend=False)
    assert s.ngram == 4 and s.consensus and s.confidence == 1.0
    assert s.chain == [5, 8, 1, 2, 3, 4]  # the most recent occurrence's continuation
    # followed by different tokens: no consensus, confidence from the chain length
    m.reset([1, 2, 3, 7, 1, 2, 3, 6, 0, 1, 2, 3])
    s = m.spine(extend=False)
    assert s.ngram == 3 and not s.consensus
    assert s.chain == [6, 0, 1, 2, 3] and s.confidence == pytest.approx(0.6 * 5 / 8)
    m.reset([1, 2, 4, 1, 2])  # only a 2-gram repeats: GOOSE matches 5/4/3-grams only
    assert m.spine().chain == []


def test_chain_is_extended_by_rematching_only_when_confident():
    text = list(range(30, 60)) + [7] + list(range(30, 34))  # 30 tokens, then its first 4 again
    m = SpineMatcher(chain=20, chain_max=100)
    m.reset(text)
    s = m.spine(extend=True)
    assert len(s.chain) > 20 and s.chain[:26] == list(range(34, 60))
    assert s.confidence == pytest.approx(0.9)
    short = SpineMatcher(chain=6, chain_max=100)  # 6 tokens -> confidence 0.45: no extension
    short.reset(text)
    assert short.spine(extend=True).chain == list(range(34, 40))


def test_matcher_is_incremental_and_keeps_the_pld_interface():
    m = SpineMatcher()
    m.reset([1, 2, 3, 4])
    m.extend([9, 1, 2, 3])
    assert m.spine(extend=False).chain == [4, 9, 1, 2, 3]
    idx = ContextIndex((3, 2))
    idx.reset([1, 2, 3, 1, 2])
    assert idx.match(5).chain == [3, 1, 2] and idx.match(5).ngram == 2
