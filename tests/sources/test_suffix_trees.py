"""The suffix-tree source (arctic-inference's SuffixDecodingCache behind goose's source interface). Runs where
arctic-inference is installed (vLLM's environment); elsewhere only its one-sentence error is checked."""

from __future__ import annotations

import pytest

from drafting.sources import suffix_trees
from drafting.sources.suffix_trees import SuffixTrees, SuffixTreesUnavailable

needs_arctic = pytest.mark.skipif(not suffix_trees.available(), reason="arctic-inference is not installed")


@pytest.mark.skipif(suffix_trees.available(), reason="arctic-inference is installed")
def test_without_arctic_inference_the_source_says_so_in_one_sentence():
    with pytest.raises(SuffixTreesUnavailable, match="needs the package arctic-inference"):
        SuffixTrees()


@needs_arctic
def test_a_request_drafts_from_its_own_prompt_and_from_earlier_answers_within_the_limit():
    trees = SuffixTrees()
    first = trees.open([1, 2, 3], [40, 41, 42])
    trees.extend(first, [43, 44, 45, 46])
    second = trees.open([7, 8, 40, 41])
    found = trees.lookup(second, [7, 8, 40, 41], 8)
    # the first request's answer, at most as many tokens as the match is long (vLLM's max_spec_factor 1)
    assert found.chain == [42, 43] and found.match == 2
    assert len(found.chain) == len(found.probs) and all(0 < p <= 1 for p in found.probs)
    assert len(trees.lookup(second, [7, 8, 40, 41], 2).chain) <= 2
    assert trees.lookup(second, [7, 8, 40, 41], 0).chain == []
    trees.close(first)
    trees.close(first)  # closing twice is harmless
    assert trees.lookup(second, [40, 41], 8).chain[:1] == [42]  # a closed request's answer stays
    own = trees.open([5, 6, 9, 5, 6, 9, 5])
    assert trees.lookup(own, [5, 6, 9, 5], 8).chain[:2] == [6, 9]  # the request's own prompt


@needs_arctic
def test_the_oldest_answers_are_forgotten_past_the_bound():
    trees = SuffixTrees(max_answers=3)  # the probe below takes a place too
    for i in range(3):
        h = trees.open([i], [100 + i, 200 + i, 300 + i])
        trees.close(h)
    probe = trees.open([0])
    assert trees.lookup(probe, [0, 100], 4).chain == []  # the first answer was evicted
    assert trees.lookup(probe, [0, 102], 4).chain == [202]
