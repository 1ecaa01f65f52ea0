"""Edits, the workload where the answer is the file again: goose and `pld:aligned=on` follow the file with the
aligned source and stay token-identical to plain decoding, through the answer's departures from the file."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from drafting.engine.decode import Decoder
from drafting.engine.speculator import StepResult
from drafting.engine.tree import ALIGNED, Draft, DraftTree
from drafting.models.chat_template import encode
from drafting.speculators import create
from support.flat_cost import FLAT

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
    # On the flat verify cost: what is tested is which source copies the file, not how much of its chain this
    # machine's measured curve (steep on a busy 2-core CPU) lets pld's pricing verify.
    dec = Decoder(replace(embedded_lm, verify_cost=lambda: FLAT), create(spec))
    accepted = departed = 0
    for ids, want in edit_prompts:
        res = dec.generate(ids, TOKENS)
        assert res.output_ids == want
        accepted += sum(1 for rec in res.records for i in rec.accepted if rec.sources[i] == ALIGNED)
        departed += dec.speculator.aligned.departures
    assert accepted > TOKENS // 2  # the file was copied through the aligned source, not another one
    assert departed > 0  # and the answers left the file somewhere, so re-alignment was exercised


def test_pld_gate_pauses_ngram_guesses_not_the_aligned_copy():
    """Failed n-gram guesses after an edit close pld's gate; the copy of the file after the edit is drafted
    anyway, since the aligned source has its own check (it drops the pointer when the answer departs)."""
    prompt = [1, 2, 3, 4, 5] + list(range(100, 160))  # an instruction and a file of distinct tokens
    copied = list(range(100, 110))  # the answer so far: the file's first ten tokens
    drafted = {}
    for spec in ("pld:aligned=on,priced=off,draft=10", "pld:priced=off,draft=10"):
        pld = create(spec)
        pld.reset(prompt)
        pld.observe(Draft(tree=DraftTree(prompt[-1])), StepResult(torch.zeros(1, 200), [0], copied, len(prompt) - 1))
        pld.ema = 0.0  # as after n-gram chains that all failed
        context = prompt + copied
        draft = pld.propose(context)
        drafted[spec] = (draft.info["route"], draft.tree.tokens[1:])
    assert drafted["pld:aligned=on,priced=off,draft=10"] == ("chain", list(range(110, 120)))
    assert drafted["pld:priced=off,draft=10"] == ("gated", [])
