"""KV bookkeeping on llama.cpp: after many tree steps the cache's sequence holds exactly the accepted tokens (its
next logits are a fresh prefill's), borrowed sequences all come back, an interrupted step is tidied, and a chat keeps
its cache from turn to turn."""

from __future__ import annotations

import gc

import pytest
import torch

from drafting.chat.session import ChatSession
from drafting.engine.decode import Decoder
from drafting.engine.tree import Draft, DraftTree
from drafting.models.chat_template import encode
from drafting.speculators import create

pytest.importorskip("llama_cpp")  # the engine is an extra: `make llamacpp-setup`

PROMPT = ("Write a Python function that checks whether a string is a palindrome, then write the same function "
          "again with a docstring, then a third time with type hints.")


def _next_logits(lm, cache, token: int) -> torch.Tensor:
    fwd = lm.make_forward(lm, None)
    at = cache.get_seq_length()
    out = fwd.step(Draft(tree=DraftTree(token)), cache)[0].clone()
    fwd.crop(cache, at)
    return out


def test_many_tree_steps_leave_exactly_the_accepted_tokens(small_llama):
    lm = small_llama
    net = lm.model
    free_before = len(net.free_sequences)
    ids = encode(lm.tokenizer, [{"role": "user", "content": PROMPT}])
    dec = Decoder(lm, create("goose:budget=24"))  # a fixed budget: trees on every step, whatever the curve says
    fwd = dec.forward
    cache = fwd.new_cache()
    run = dec.run(ids, 96, cache=cache)
    result = run.finish()
    branched = [r for r in result.records if any(p != i - 1 for i, p in enumerate(r.parents))]
    assert result.steps > 10 and branched, "no step verified a tree with branches"
    assert not cache.scratch and len(net.free_sequences) == free_before - 1  # only the cache's own sequence is out
    held = ids + result.output_ids
    kept = fwd.crop(cache, len(held) - 1)
    assert kept == len(held) - 1
    fresh = fwd.new_cache()
    fwd.prefill(held[:-1], fresh)
    a, b = _next_logits(lm, cache, held[-1]), _next_logits(lm, fresh, held[-1])
    assert float((a - b).abs().max()) < 0.05
    del run, cache, fresh
    gc.collect()
    assert len(net.free_sequences) == free_before  # dropped caches give their sequences back


def test_an_interrupted_step_is_tidied_before_the_next_pass(small_llama):
    lm = small_llama
    fwd = lm.make_forward(lm, None)
    ids = encode(lm.tokenizer, [{"role": "user", "content": PROMPT}])
    cache = fwd.new_cache()
    fwd.prefill(ids[:-1], cache)
    reference = _next_logits(lm, cache, ids[-1])
    tree = DraftTree(ids[-1])
    a = tree.add(11, 0, "x")
    tree.add(12, 0, "x")
    tree.add(13, a, "x")
    fwd.step(Draft(tree=tree), cache)  # never kept: as when Ctrl-C lands between the pass and acceptance
    assert cache.scratch
    again = _next_logits(lm, cache, ids[-1])  # the next pass drops the stray rows and borrowed sequences first
    assert not cache.scratch and cache.get_seq_length() == len(ids) - 1
    assert float((again - reference).abs().max()) < 0.05


def test_a_chat_keeps_its_cache_between_turns_and_answers_as_a_full_prefill(small_llama):
    turns = ["Hi!", "Name a colour.", "Count to three.", "Bye."]
    kept = ChatSession(small_llama, "goose", max_new_tokens=12)
    full = ChatSession(small_llama, "goose", max_new_tokens=12, keep_cache=False)
    for turn, text in enumerate(turns, 1):
        a = [t for r, _ in kept.ask(text) for t in r.emitted]
        b = [t for r, _ in full.ask(text) for t in r.emitted]
        assert a == b, f"turn {turn} differs"
        if turn > 1:
            assert kept.prefilled < 40 < kept.prompt_tokens
        assert kept._cache.get_seq_length() == len(kept._cached_ids)
