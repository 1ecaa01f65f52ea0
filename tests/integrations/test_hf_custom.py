"""drafting.custom_generate inside transformers' own generate(): the embedded model loaded by plain
transformers from goose's converted folder, against plain generate() on real prompts."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import EXAMPLES

import drafting

TOKENS = 40


@pytest.fixture(scope="module")
def hf(embedded_lm):
    """(model, tokenizer) as a transformers user has them: from_pretrained on the converted folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = drafting.embedded_model_folder()
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    return model, tok


def _inputs(tok, text: str):
    msgs = [{"role": "user", "content": text}]
    return tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)


def _prompts(n: int) -> list[str]:
    rows = [json.loads(line) for line in (EXAMPLES / "prompts.jsonl").read_text().splitlines() if line.strip()]
    return [r["prompt"] for r in rows[:n]]


def _fingerprint(model) -> tuple:
    return (model.config._attn_implementation, tuple(type(m).__name__ for m in model.modules()),
            tuple(p.data_ptr() for p in model.parameters()))


@pytest.mark.heavy  # four real prompts through generate() twice each; the tests below run goose inside generate() on shorter ones
def test_goose_inside_generate_is_identical_to_plain_generate_on_real_prompts(hf):
    model, tok = hf
    before = _fingerprint(model)
    prompts = _prompts(12)[::3]  # four of the twelve, from four task groups
    assert len(prompts) == 4
    for text in prompts:
        inputs = _inputs(tok, text)
        plain = model.generate(**inputs, max_new_tokens=TOKENS, do_sample=False)
        goose = model.generate(**inputs, custom_generate=drafting.custom_generate, speculator="goose",
                               max_new_tokens=TOKENS)
        assert torch.equal(goose, plain), f"custom_generate differs from generate() on {text[:40]!r}"
    assert _fingerprint(model) == before  # attention, modules and weights as the caller had them


def test_streamer_receives_the_answer_text(hf):
    from transformers import TextStreamer

    model, tok = hf

    class Collect(TextStreamer):
        def __init__(self):
            super().__init__(tok, skip_prompt=True)
            self.pieces: list[str] = []

        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            self.pieces.append(text)

    streamer = Collect()
    inputs = _inputs(tok, "Write a haiku about geese.")
    out = model.generate(**inputs, custom_generate=drafting.custom_generate, speculator="pld",
                         max_new_tokens=24, streamer=streamer)
    new = out[0, inputs["input_ids"].shape[1]:]
    assert len(new) > 3
    assert "".join(streamer.pieces) == tok.decode(new)


def test_eos_token_id_and_return_dict_are_honoured(hf):
    model, tok = hf
    inputs = _inputs(tok, "List three colours, separated by commas.")
    start = inputs["input_ids"].shape[1]
    plain = model.generate(**inputs, max_new_tokens=TOKENS, do_sample=False)
    stop_at = int(plain[0, start + 3])  # a token of the answer becomes the EOS
    want = model.generate(**inputs, max_new_tokens=TOKENS, do_sample=False, eos_token_id=stop_at)
    got = model.generate(**inputs, custom_generate=drafting.custom_generate, speculator="goose",
                         max_new_tokens=TOKENS, eos_token_id=stop_at, return_dict_in_generate=True)
    assert type(got).__name__ == "GenerateDecoderOnlyOutput"
    assert torch.equal(got.sequences, want)
    assert int(got.sequences[0, -1]) == stop_at and got.sequences.shape[1] <= start + 4


def test_seeded_sampling_is_reproducible_and_bounded(hf):
    model, tok = hf
    inputs = _inputs(tok, "Tell me a fact about rivers.")
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        # a fixed budget: with budget=auto the tree follows the step times measured during the run (curve_watch),
        # so on a busy machine the two runs draft different trees and draw their randomness differently
        runs.append(model.generate(**inputs, custom_generate=drafting.custom_generate, speculator="goose:budget=8",
                                   max_new_tokens=12, do_sample=True, temperature=0.8, top_k=20))
    assert torch.equal(runs[0], runs[1])
    assert runs[0].shape[1] <= inputs["input_ids"].shape[1] + 12


def test_unsupported_settings_fail_with_one_sentence(hf):
    model, tok = hf
    inputs = _inputs(tok, "Hello")
    with pytest.raises(ValueError, match="cannot apply RepetitionPenaltyLogitsProcessor"):
        model.generate(**inputs, custom_generate=drafting.custom_generate, max_new_tokens=4, repetition_penalty=1.3)
    batch = torch.cat([inputs["input_ids"]] * 2)
    with pytest.raises(ValueError, match="batch of 2"):
        model.generate(input_ids=batch, custom_generate=drafting.custom_generate, max_new_tokens=4)
    with pytest.raises(drafting.SpecError, match="Unknown speculator"):
        model.generate(**inputs, custom_generate=drafting.custom_generate, speculator="nope", max_new_tokens=4)
    assert model.config._attn_implementation == "sdpa"
