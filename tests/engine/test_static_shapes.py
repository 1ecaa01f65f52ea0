"""The static-shapes option (preallocated cache, bucketed step sizes) on CPU, eagerly: tree logits equal
sequential ones, compaction keeps the accepted path, and every speculator's output equals plain decoding."""

from __future__ import annotations

import random

import pytest
import torch

from drafting.engine.decode import Decoder
from drafting.speculators import create
from drafting.engine.hf.static_shapes import StaticForward, StaticShapeError, StaticShapes
from drafting.engine.tree import Draft, DraftTree
from drafting.engine.hf.forward import keep_accepted

SHAPES = StaticShapes(buckets=(1, 4, 16, 64))


def _sequential(lm, ids):
    with torch.inference_mode():
        return lm.model(input_ids=torch.tensor([ids]), position_ids=torch.arange(len(ids))[None]).logits[0, -1]


def _tree(rng, root, size, vocab):
    tree = DraftTree(root)
    while len(tree) < size:
        tree.add(rng.randrange(2, vocab - 1), rng.randrange(len(tree)), "probe")
    return tree


def test_buckets_round_up():
    s = StaticShapes(buckets=(1, 4, 16))
    assert [s.bucket(n) for n in (1, 2, 4, 5, 16, 17, 33)] == [1, 4, 4, 16, 16, 32, 48]


@pytest.mark.parametrize("seed", range(4))
def test_static_tree_logits_and_compaction_match_sequential(tiny_lm, seed):
    rng = random.Random(seed)
    prefix = [rng.randrange(2, 120) for _ in range(rng.randrange(5, 40))]
    fwd = StaticForward(tiny_lm.model, tiny_lm.dtype, tiny_lm.device, tiny_lm.max_context, SHAPES)
    cache = fwd.new_cache()
    fwd.prefill(prefix[:-1], cache)
    tree = _tree(rng, prefix[-1], rng.randrange(2, 30), tiny_lm.vocab_size)  # padded to 4, 16 or 64 rows
    logits = fwd.step(Draft(tree=tree), cache)
    assert logits.shape[0] == len(tree)
    for node in range(len(tree)):
        expect = _sequential(tiny_lm, prefix[:-1] + [tree.tokens[i] for i in tree.path_to(node)])
        assert torch.allclose(logits[node], expect, atol=1e-4), f"node {node}"
    path = max((tree.path_to(i) for i in range(len(tree))), key=len)
    keep_accepted(cache, len(prefix) - 1, path)
    assert cache.get_seq_length() == len(prefix) - 1 + len(path)
    nxt = rng.randrange(2, 120)
    got = fwd.step(Draft(tree=DraftTree(nxt)), cache)[0]
    expect = _sequential(tiny_lm, prefix[:-1] + [tree.tokens[i] for i in path] + [nxt])
    assert torch.allclose(got, expect, atol=1e-4)


@pytest.mark.parametrize("spec", ["ar", "pld", "tr", "goose", "lookahead", "ptd"])
def test_static_decoding_equals_dynamic_decoding(tiny_lm, spec):
    rng = random.Random(7)
    seg = [rng.randrange(2, 120) for _ in range(10)]
    prompts = [seg + [5, 6] + seg + seg[:4], [rng.randrange(2, 120) for _ in range(30)]]
    plain = Decoder(tiny_lm, create(spec))
    static = Decoder(tiny_lm, create(spec), static_shapes=SHAPES)
    for ids in prompts * 2:  # twice: the shared cache is reused across prompts
        assert static.generate(ids, 40).output_ids == plain.generate(ids, 40).output_ids


def test_a_shorter_static_context_is_the_decoder_s_context(tiny_lm):
    dec = Decoder(tiny_lm, create("goose"), static_shapes=StaticShapes(buckets=(1, 16), context=48))
    assert dec.max_context == 48
    res = dec.generate(list(range(2, 40)), 30)
    # every token but the last emitted one is in the cache, which holds 48
    assert res.stop_reason == "context" and len(res.prompt_ids) + len(res.output_ids) - 1 <= 48
    plain = Decoder(tiny_lm, create("goose")).generate(list(range(2, 40)), len(res.output_ids))
    assert res.output_ids == plain.output_ids


def test_bad_buckets_are_one_sentence(tiny_lm):
    with pytest.raises(StaticShapeError, match="increasing order"):
        StaticForward(tiny_lm.model, tiny_lm.dtype, tiny_lm.device, 64, StaticShapes(buckets=(16, 4)))


def test_static_step_that_does_not_fit_is_refused(tiny_lm):
    fwd = StaticForward(tiny_lm.model, tiny_lm.dtype, tiny_lm.device, 8, StaticShapes(buckets=(4,)))
    cache = fwd.new_cache()
    fwd.prefill(list(range(2, 11)), cache)
    with pytest.raises(StaticShapeError):
        fwd.step(Draft(tree=DraftTree(3)), cache)
