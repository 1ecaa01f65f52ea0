"""Shared fixtures: a tiny random Llama for mechanics, the embedded model for end-to-end losslessness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def tiny_lm():
    """A 2-layer random Llama (vocab 128) in fp32, wrapped like a loaded model."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from drafting.model import LoadedModel

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=127,
        bos_token_id=1,
    )
    model = LlamaForCausalLM(config).eval()
    return LoadedModel(
        model=model, tokenizer=None, name="tiny-random-llama", device=torch.device("cpu"),
        dtype=torch.float32, eos_ids={127}, max_context=512,
    )


@pytest.fixture(scope="session")
def embedded_lm():
    from drafting.model import load_model

    return load_model()


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def real_prompts(embedded_lm) -> list[tuple[str, list[int]]]:
    """12 real prompts (2 per task group) as (id, chat-templated token ids)."""
    from drafting.prompting import encode

    out = []
    for rec in _read(EXAMPLES / "prompts.jsonl"):
        out.append((rec["id"], encode(embedded_lm.tokenizer, [{"role": "user", "content": rec["prompt"]}])))
    return out


LOSSLESS_TOKENS = 40


@pytest.fixture(scope="session")
def ar_outputs(embedded_lm, real_prompts) -> dict[str, list[int]]:
    """Plain greedy decoding of every real prompt, computed once per test session."""
    from drafting.decode import Decoder
    from drafting.speculators import create

    dec = Decoder(embedded_lm, create("ar"))
    return {pid: dec.generate(ids, LOSSLESS_TOKENS).output_ids for pid, ids in real_prompts}


@pytest.fixture(scope="session")
def assert_lossless(embedded_lm, real_prompts, ar_outputs):
    """Call with a speculator spec: its greedy output must equal `ar` on every real prompt."""
    from drafting.decode import Decoder
    from drafting.speculators import create

    def check(spec: str) -> None:
        dec = Decoder(embedded_lm, create(spec))
        for pid, ids in real_prompts:
            got = dec.generate(ids, LOSSLESS_TOKENS).output_ids
            assert got == ar_outputs[pid], f"{spec} differs from ar on {pid}"

    return check
