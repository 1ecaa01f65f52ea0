"""drafting.generate / drafting.stream on the embedded model: identical to plain decoding, streamed text, stop
strings, the model cache, a caller's model object, and one-sentence errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT

import drafting
from drafting import api

HAIKU = "Write a haiku about geese."


@pytest.fixture(scope="module")
def haiku_ar(embedded_lm):
    return drafting.generate(HAIKU, max_new_tokens=32, speculator="ar")


def test_generate_is_identical_to_plain_decoding(embedded_lm, haiku_ar):
    from drafting.engine.decode import Decoder
    from drafting.models.chat_template import encode
    from drafting.speculators import create

    g = drafting.generate(HAIKU, max_new_tokens=32)
    ids = encode(embedded_lm.tokenizer, [{"role": "user", "content": HAIKU}])
    plain = Decoder(embedded_lm, create("ar")).generate(ids, 32).output_ids
    assert g.token_ids == haiku_ar.token_ids == plain
    assert g.text and g.text == embedded_lm.tokenizer.decode(plain, skip_special_tokens=True)
    assert g.stop_reason in ("eos", "max_new_tokens")
    st = g.stats
    assert st["steps"] == len(g.records) and st["tokens"] == len(g.token_ids)
    assert st["mean_accepted"] == pytest.approx(len(g.token_ids) / st["steps"])
    assert st["tokens_per_s"] > 0 and st["verify_s"] > 0 and st["draft_s"] >= 0
    offered = sum(len(r.sources) - 1 for r in g.records)
    assert sum(a["offered"] for a in st["acceptance"].values()) == offered
    assert sum(a["accepted"] for a in st["acceptance"].values()) == sum(len(r.accepted) - 1 for r in g.records)


def test_models_load_once_per_process(embedded_lm, haiku_ar):
    keys = [k for k in api._MODELS if k[0] is None]
    assert len(keys) == 1
    lm = api._MODELS[keys[0]]
    drafting.generate("Hi", max_new_tokens=2, speculator="pld")
    assert api._MODELS[keys[0]] is lm and len([k for k in api._MODELS if k[0] is None]) == 1


def test_stream_pieces_join_to_the_text_with_their_records(haiku_ar):
    s = drafting.stream(HAIKU, max_new_tokens=32, speculator="goose")
    pieces = list(s)
    assert pieces and all(isinstance(p.record.emitted, list) for p in pieces)
    text, record = pieces[0]
    assert "".join(p.text for p in pieces) == s.generation.text == haiku_ar.text
    assert [t for p in pieces for t in p.record.emitted] == s.generation.token_ids == haiku_ar.token_ids


def test_stop_strings_cut_like_transformers(haiku_ar, embedded_lm):
    tok = embedded_lm.tokenizer
    words = haiku_ar.text.split()
    stop = words[len(words) // 2]
    g = drafting.generate(HAIKU, max_new_tokens=32, stop=[stop, "never-appears-here"])
    assert g.stop_reason == "stop"
    assert haiku_ar.token_ids[: len(g.token_ids)] == g.token_ids  # a prefix of the full answer
    assert stop in g.text
    shorter = tok.decode(g.token_ids[:-1], skip_special_tokens=True)
    assert stop not in shorter  # generation ended at the token that completed the stop string
    assert drafting.generate(HAIKU, max_new_tokens=32, stop="never-appears-here").token_ids == haiku_ar.token_ids


def test_seeded_sampling_repeats(embedded_lm):
    # a fixed budget: budget=auto's tree follows the step times measured during the run (docs/python.md)
    a = drafting.generate("Name a river.", speculator="goose:budget=8", max_new_tokens=10, temperature=0.9, top_k=40, seed=5)
    b = drafting.generate("Name a river.", speculator="goose:budget=8", max_new_tokens=10, temperature=0.9, top_k=40, seed=5)
    assert a.token_ids == b.token_ids and 0 < len(a.token_ids) <= 10


def test_one_token_prompt_and_raw_text(embedded_lm):
    ids = embedded_lm.tokenizer("Hello", add_special_tokens=True)["input_ids"]
    assert len(ids) == 1
    g = drafting.generate("Hello", chat=False, max_new_tokens=6)
    assert g.prompt_ids == ids and 0 < len(g.token_ids) <= 6
    assert g.token_ids == drafting.generate("Hello", chat=False, max_new_tokens=6, speculator="ar").token_ids


@pytest.mark.parametrize("kwargs, message", [
    ({"max_new_tokens": 0}, "max_new_tokens must be a positive"),
    ({"max_new_tokens": -3}, "max_new_tokens must be a positive"),
    ({"temperature": -1.0}, "temperature must be 0"),
    ({"top_p": 0.0}, r"top_p must be a number in \(0, 1\]"),
    ({"top_k": -2}, "top_k must be 0"),
    ({"stop": [""]}, "stop must be a string"),
    ({"speculator": "nope"}, "Unknown speculator 'nope'"),
    ({"speculator": "pld:bogus=1"}, "has no option 'bogus'"),
    ({"model": 42}, "model must be None"),
    ({"tokenizer": object()}, "tokenizer= goes with a model object"),
])
def test_bad_options_raise_one_sentence(embedded_lm, kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        drafting.generate("Hi", **kwargs)
    assert str(err.value).count(". ") == 0 and str(err.value).endswith(".")


@pytest.mark.parametrize("prompt", ["", "   ", [], [{"role": "user", "content": ""}], 7])
def test_empty_or_malformed_prompts_raise(embedded_lm, prompt):
    with pytest.raises(ValueError, match="prompt"):
        drafting.generate(prompt, max_new_tokens=4)


def test_prompt_too_long_raises_context_error(embedded_lm):
    with pytest.raises(drafting.ContextError, match="context window"):
        drafting.generate("goose " * (embedded_lm.max_context + 10), chat=False, max_new_tokens=4)


def test_unknown_model_path_raises_model_error():
    with pytest.raises(drafting.ModelError, match="does not exist"):
        drafting.generate("Hi", model="./no/such/model", max_new_tokens=4)


def test_callers_model_object_is_used_and_left_as_it_was(embedded_lm):
    from transformers import AutoModelForCausalLM

    folder = drafting.embedded_model_folder()
    net = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    tok = embedded_lm.tokenizer
    before = (net.config._attn_implementation, [type(m) for m in net.modules()], [p.data_ptr() for p in net.parameters()])
    g = drafting.generate(HAIKU, model=net, tokenizer=tok, max_new_tokens=24)
    inputs = tok.apply_chat_template([{"role": "user", "content": HAIKU}], add_generation_prompt=True,
                                     return_tensors="pt", return_dict=True)
    plain = net.generate(**inputs, max_new_tokens=24, do_sample=False)[0, inputs["input_ids"].shape[1]:].tolist()
    assert g.token_ids == plain
    after = (net.config._attn_implementation, [type(m) for m in net.modules()], [p.data_ptr() for p in net.parameters()])
    assert after == before
    with pytest.raises(ValueError, match="needs its tokenizer"):
        drafting.generate(HAIKU, model=net, max_new_tokens=4)


def test_windowed_model_runs_and_a_hybrid_model_is_refused_with_one_sentence(embedded_lm):
    from transformers import MistralConfig, MistralForCausalLM, Qwen3NextConfig, Qwen3NextForCausalLM

    torch.manual_seed(0)
    vocab = embedded_lm.vocab_size
    windowed = MistralForCausalLM(MistralConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                num_attention_heads=4, num_key_value_heads=2, sliding_window=8,
                                                max_position_embeddings=256)).eval()
    tok = embedded_lm.tokenizer
    tree = drafting.generate("Hi there, hi there", model=windowed, tokenizer=tok, speculator="goose", max_new_tokens=24)
    plain = drafting.generate("Hi there, hi there", model=windowed, tokenizer=tok, speculator="ar", max_new_tokens=24)
    assert tree.token_ids == plain.token_ids and len(plain.token_ids) > 8  # past the window of 8
    hybrid = Qwen3NextForCausalLM(Qwen3NextConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
        linear_value_head_dim=16, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, layer_types=["linear_attention", "full_attention"])).eval()
    with pytest.raises(drafting.UnsupportedModelError) as err:
        drafting.generate("Hi", model=hybrid, tokenizer=tok, speculator="goose", max_new_tokens=4)
    message = str(err.value)
    assert "linear_attention" in message and message.count(". ") == 0 and message.endswith(".")


def test_import_is_light():
    code = "import sys, drafting; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "GOOSE_CACHE": os.environ["GOOSE_CACHE"]})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
