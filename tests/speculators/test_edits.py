"""Edits, the workload where the answer is the file again: goose and `pld:aligned=on` follow the file with the
aligned source and stay token-identical to plain decoding, through the answer's departures from the file."""

import json
from pathlib import Path

import pytest

from drafting.engine.decode import Decoder
from drafting.engine.tree import ALIGNED
from drafting.models.chat_template import encode
from drafting.speculators import create

EDITS = Path(__file__).resolve().parents[2] / "examples" / "edits.jsonl"
TOKENS = 96


@pytest.fixture(scope="module")
def edit_prompts(embedded_lm):
    """The first two programs of the public edit set, chat-templated, with plain decoding's answers."""
    rows = [json.loads(line) for line in EDITS.read_text().splitlines()[:2]]
    prompts = [encode(embedded_lm.tokenizer, [{"role": "user", "content": r["prompt"]}]) for r in rows]
    plain = Decoder(embedded_lm, create("ar"))
    return [(ids, plain.generate(ids, TOKENS).output_ids) for ids in prompts]


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["goose", "pld:aligned=on"])
def test_the_aligned_source_drafts_edits_losslessly(embedded_lm, edit_prompts, spec):
    dec = Decoder(embedded_lm, create(spec))
    accepted = departed = 0
    for ids, want in edit_prompts:
        res = dec.generate(ids, TOKENS)
        assert res.output_ids == want
        accepted += sum(1 for rec in res.records for i in rec.accepted if rec.sources[i] == ALIGNED)
        departed += dec.speculator.aligned.departures
    assert accepted > TOKENS // 2  # the file was copied through the aligned source, not another one
    assert departed > 0  # and the answers left the file somewhere, so re-alignment was exercised
