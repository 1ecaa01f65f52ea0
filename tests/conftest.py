"""Shared fixtures: a tiny random Llama for mechanics, the embedded model for end-to-end losslessness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tinymodel import tiny_llama

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def tiny_lm():
    """A 2-layer random Llama (vocab 128) in fp32, wrapped like a loaded model."""
    return tiny_llama(128, 64, 512, bos=1, eos_ids={127}, name="tiny-random-llama")


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
