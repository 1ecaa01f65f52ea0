"""Tree verification on a tiny random Llama: every tree node's logits equal a plain sequential pass over its
path, cache compaction keeps exactly the accepted path, and decoding with a tree speculator equals `ar`."""

from __future__ import annotations

import random

import pytest
import torch

from drafting.engine.decode import Decoder
from drafting.engine.hf.kv_cache import new_cache
from drafting.speculators import create
from drafting.engine.speculator import Speculator
from drafting.engine.tree import Draft, DraftTree
from drafting.engine.hf.forward import HFForward, keep_accepted

ATOL = 1e-4


def sequential_logits(lm, ids: list[int]) -> torch.Tensor:
    """Last-position logits of a fresh causal pass over ``ids`` (no cache, no custom mask)."""
    with torch.inference_mode():
        x = torch.tensor([ids])
        pos = torch.arange(len(ids))[None]
        return lm.model(input_ids=x, position_ids=pos).logits[0, -1]


def random_tree(rng: random.Random, root: int, size: int, vocab: int) -> DraftTree:
    tree = DraftTree(root)
    while len(tree) < size:
        parent = rng.randrange(len(tree))
        tree.add(rng.randrange(2, vocab - 1), parent, rng.choice(["context", "adjacency", "pool"]))
    return tree


def prefilled(lm, prefix: list[int]):
    cache = new_cache(lm.model.config)
    fwd = HFForward(lm.model, lm.dtype, lm.device)
    fwd.prefill(prefix[:-1], cache)
    return fwd, cache


@pytest.mark.parametrize("seed", range(6))
def test_tree_logits_equal_sequential_logits(tiny_lm, seed):
    rng = random.Random(seed)
    prefix = [rng.randrange(2, 120) for _ in range(rng.randrange(5, 40))]
    fwd, cache = prefilled(tiny_lm, prefix)
    tree = random_tree(rng, prefix[-1], rng.randrange(2, 40), tiny_lm.vocab_size)
    logits = fwd.step(Draft(tree=tree), cache)
    assert logits.shape[0] == len(tree)
    for node in range(len(tree)):
        path = [tree.tokens[i] for i in tree.path_to(node)]
        expect = sequential_logits(tiny_lm, prefix[:-1] + path)
        assert torch.allclose(logits[node], expect, atol=ATOL), f"node {node} (depth {tree.depths[node]})"


def _deepest_non_contiguous_path(tree: DraftTree) -> list[int]:
    best: list[int] = []
    for node in range(len(tree)):
        path = tree.path_to(node)
        if path != list(range(len(path))) and len(path) > len(best):
            best = path
    return best


@pytest.mark.parametrize("seed", range(6))
def test_compaction_keeps_only_the_accepted_path(tiny_lm, seed):
    """After keep_accepted on a non-contiguous path, continuing gives the logits of a fresh sequential pass."""
    rng = random.Random(100 + seed)
    prefix = [rng.randrange(2, 120) for _ in range(rng.randrange(5, 30))]
    fwd, cache = prefilled(tiny_lm, prefix)
    tree = random_tree(rng, prefix[-1], 30, tiny_lm.vocab_size)
    path = _deepest_non_contiguous_path(tree)
    assert len(path) >= 2 and path != list(range(len(path)))
    fwd.step(Draft(tree=tree), cache)
    prefix_len = len(prefix) - 1
    keep_accepted(cache, prefix_len, path)
    assert cache.get_seq_length() == prefix_len + len(path)
    committed = prefix[:-1] + [tree.tokens[i] for i in path]
    # continue with a second random tree rooted at a new token, as the decode loop does
    nxt = rng.randrange(2, 120)
    tree2 = random_tree(rng, nxt, 12, tiny_lm.vocab_size)
    logits = fwd.step(Draft(tree=tree2), cache)
    for node in range(len(tree2)):
        expect = sequential_logits(tiny_lm, committed + [tree2.tokens[i] for i in tree2.path_to(node)])
        assert torch.allclose(logits[node], expect, atol=ATOL), f"after compaction, node {node}"


class OracleTree(Speculator):
    """Test speculator: random distractor branches around the true continuation (known from `ar`), placed at
    random sibling positions so accepted paths are non-contiguous, and sometimes wrong part-way."""

    name = ""  # not registered

    def __init__(self, reference: list[int], prompt_len: int, seed: int = 0):
        super().__init__()
        self.reference = reference
        self.prompt_len = prompt_len
        self.rng = random.Random(seed)

    def propose(self, context: list[int]) -> Draft:
        rng = self.rng
        tree = DraftTree(context[-1])
        done = len(context) - self.prompt_len
        truth = self.reference[done : done + rng.randrange(0, 7)]
        if truth and rng.random() < 0.3:
            truth = truth[:-1] + [(truth[-1] + 1) % 120 + 2]  # wrong last token
        parent = 0
        for tok in truth:
            for _ in range(rng.randrange(0, 3)):  # distractors first, so the true child is not the next index
                tree.add(rng.randrange(2, 126), parent, "pool")
            parent = tree.add(tok, parent, "context")
        for _ in range(rng.randrange(0, 6)):
            tree.add(rng.randrange(2, 126), rng.randrange(len(tree)), "adjacency")
        return Draft(tree=tree, info={"truth": len(truth)})


def test_tree_decoding_equals_ar_on_tiny_model(tiny_lm):
    rng = random.Random(7)
    for trial in range(3):
        prompt = [rng.randrange(2, 120) for _ in range(rng.randrange(3, 25))]
        ref = Decoder(tiny_lm, create("ar")).generate(prompt, 60)
        dec = Decoder(tiny_lm, OracleTree(ref.output_ids, len(prompt), seed=trial))
        got = dec.generate(prompt, 60)
        assert got.output_ids == ref.output_ids
        assert got.mean_accepted > 1.5  # multi-token steps really happened
        assert any(r.accepted != list(range(len(r.accepted))) for r in got.records), "no non-contiguous path"


def test_pld_equals_ar_on_tiny_model(tiny_lm):
    prompt = [5, 6, 7, 8, 9, 10, 11] * 4 + [5, 6]
    ref = Decoder(tiny_lm, create("ar")).generate(prompt, 50)
    for spec in ("pld", "pld:gate=off,min_ngram=1"):
        assert Decoder(tiny_lm, create(spec)).generate(prompt, 50).output_ids == ref.output_ids

