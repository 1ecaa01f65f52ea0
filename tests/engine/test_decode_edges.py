"""The decode loop at its edges: EOS exactly at the max_new_tokens boundary inside an accepted path, a tree
trimmed at the end of the context window, max_new_tokens below one, a one-token prompt, a prompt made only of
special tokens, and a hook whose work the run's clock leaves out. Every output is checked against plain decoding
(and plain decoding against full forwards)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
import torch

from drafting.engine.decode import Decoder
from drafting.engine.hooks import DecodeHook, RecordMargins
from drafting.models.chat_template import decode, encode
from drafting.speculators import create, registry
from drafting.engine.speculator import Speculator
from drafting.engine.tree import Draft, DraftTree

PROMPT = [3, 44, 17, 90, 5, 61, 23, 8]


class ChainOracle(Speculator):
    """Test speculator: drafts the true continuation (known from `ar`) as one chain of ``length`` tokens, with a
    wrong sibling under every chain node, so each step accepts a long path that is not contiguous."""

    name = ""  # not registered

    def __init__(self, reference: list[int], prompt_len: int, length: int):
        super().__init__()
        self.reference, self.prompt_len, self.length = reference, prompt_len, length

    def propose(self, context: list[int]) -> Draft:
        tree = DraftTree(context[-1])
        done = len(context) - self.prompt_len
        parent = 0
        for tok in self.reference[done : done + self.length]:
            tree.add((tok + 1) % 120 + 2, parent, "pool")  # a distractor first: the true child is not next
            parent = tree.add(tok, parent, "context")
        return Draft(tree=tree)


def full_forward_greedy(lm, prompt: list[int], n: int) -> list[int]:
    """Greedy decoding by a fresh full forward per token: no cache, no tree mask."""
    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            tok = int(lm.model(torch.tensor([ids])).logits[0, -1].argmax())
            ids.append(tok)
            if tok in lm.eos_ids:
                break
    return ids[len(prompt):]


def count_forwards(model: torch.nn.Module) -> tuple[list[int], object]:
    calls = [0]
    handle = model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls, handle


def test_eos_inside_an_accepted_path_at_the_max_new_tokens_boundary(tiny_lm):
    no_eos = replace(tiny_lm, eos_ids=set())
    ref = Decoder(no_eos, create("ar")).generate(PROMPT, 30).output_ids
    k = next(i for i in range(3, 20) if ref[i] not in ref[:i])  # the first time this token appears
    eos = ref[k]
    lm = replace(tiny_lm, eos_ids={eos})
    for limit, stop in ((k + 1, "eos"), (k, "max_new_tokens")):  # EOS the last allowed token / one past it
        plain = Decoder(lm, create("ar")).generate(PROMPT, limit)
        assert plain.output_ids == ref[:limit] and plain.stop_reason == stop
        res = Decoder(lm, ChainOracle(ref, len(PROMPT), length=k + 4)).generate(PROMPT, limit)
        assert res.output_ids == plain.output_ids and res.stop_reason == stop
        assert res.steps == 1  # the whole answer came from one accepted path ...
        step = res.records[0]
        accepted = [step.tokens[i] for i in step.accepted[1:]]
        assert accepted[k] == eos and len(accepted) > k + 1  # ... with EOS inside it, not as the bonus token
        assert step.emitted == ref[:limit] and step.stop == stop


@pytest.mark.parametrize("spec", ["oracle", "ptd:rows=24", "lookahead:rows=12"])
def test_tree_trimmed_at_the_end_of_the_context_records_only_what_was_verified(tiny_lm, spec):
    context = len(PROMPT) + 30
    lm = replace(tiny_lm, eos_ids=set(), max_context=context)
    plain = Decoder(lm, create("ar")).generate(PROMPT, 100)
    # the cache holds the prompt but its last token, then one token per step; the last output needs no slot
    assert plain.stop_reason == "context" and len(plain.output_ids) == context - len(PROMPT) + 1
    speculator = ChainOracle(plain.output_ids, len(PROMPT), length=16) if spec == "oracle" else create(spec)
    res = Decoder(lm, speculator).generate(PROMPT, 100)
    assert res.output_ids == plain.output_ids and res.stop_reason == "context"
    trimmed = [r for r in res.records if r.info.get("trimmed")]
    assert trimmed, "no draft ran into the end of the context window"
    for r in res.records:
        room = context - (len(PROMPT) - 1 + r.position)  # free cache positions when the step ran
        rows = len(r.rows["tokens"]) if r.rows else 0
        assert len(r.tokens) + rows <= room
        assert all(p < i for i, p in enumerate(r.parents) if i) and max(r.accepted) < len(r.tokens)
        if r in trimmed:
            assert r.rows is None  # draft rows are dropped with the trim, their description too
            assert r.emitted == [r.tokens[i] for i in r.accepted[1:]] + r.emitted[len(r.accepted) - 1 :]


@pytest.mark.parametrize("limit", [0, -3])
def test_max_new_tokens_below_one_is_refused_before_any_step(tiny_lm, limit):
    decoders = [Decoder(tiny_lm, create(spec)) for spec in ("ar", "pld", "ptd")]  # ptd measures its cost curve here
    calls, handle = count_forwards(tiny_lm.model)
    try:
        for dec in decoders:
            with pytest.raises(ValueError) as err:
                dec.generate(PROMPT, limit)
            assert str(err.value) == f"max_new_tokens must be at least 1, not {limit}."
            with pytest.raises(ValueError):
                dec.run(PROMPT, limit)  # refused when the run is asked for, before any step
    finally:
        handle.remove()
    assert calls[0] == 0  # no prefill, no step


@pytest.mark.parametrize("spec", list(registry()))
def test_one_token_prompt(tiny_lm, spec):
    lm = replace(tiny_lm, eos_ids=set())
    want = full_forward_greedy(lm, [5], 24)
    res = Decoder(lm, create(spec)).generate([5], 24)
    assert res.output_ids == want and len(want) == 24
    assert res.records[0].position == 0 and res.records[0].tokens[0] == 5  # the prompt token is the first root


@pytest.mark.slow
def test_prompt_of_only_special_tokens(embedded_lm):
    tok = embedded_lm.tokenizer
    special = [t for t in tok.all_special_ids if t not in embedded_lm.eos_ids]
    prompt = special * 3
    assert prompt and all(t in tok.all_special_ids for t in prompt)
    assert decode(tok, prompt) == ""  # nothing in it a reader would see
    raw = encode(tok, [{"role": "user", "content": tok.decode(prompt)}], raw=True)
    assert raw[-len(prompt):] == prompt  # typed as text, the special tokens come back as themselves
    want = Decoder(embedded_lm, create("ar")).generate(prompt, 16)
    assert want.output_ids
    for spec in ("pld", "goose", "ptd"):
        got = Decoder(embedded_lm, create(spec)).generate(prompt, 16)
        assert got.output_ids == want.output_ids and got.stop_reason == want.stop_reason, spec
    assert isinstance(decode(tok, want.output_ids, embedded_lm.eos_ids), str)


def test_an_untimed_hook_is_left_out_of_the_runs_clock_and_a_timed_one_is_not(tiny_lm):
    """A benchmark's own bookkeeping (ar's margins) must not slow the plain decoding it measures: a hook marked
    ``timed = False`` runs after every step but its time is not the run's; a timed hook's time is."""

    class Slow(DecodeHook):
        def __init__(self, timed: bool):
            self.timed = timed

        def after_step(self, run, step) -> None:
            time.sleep(0.05)

    steps = 6
    untimed = Decoder(tiny_lm, create("ar"), hooks=[Slow(False), RecordMargins()]).generate(PROMPT, steps)
    timed = Decoder(tiny_lm, create("ar"), hooks=[Slow(True)]).generate(PROMPT, steps)
    assert untimed.steps == timed.steps == steps
    assert timed.wall_s >= steps * 0.05
    # half the sleeps as slack: the two runs' own compute differs by a preempted step or two on a shared machine
    assert untimed.wall_s < timed.wall_s - steps * 0.05 / 2
    assert len(untimed.margins) == steps and all(m >= 0 for m in untimed.margins)
