"""Every registered speculator runs unchanged on llama.cpp, and its greedy output is plain decoding's on the same
engine up to near-ties, on one real prompt of each task group of the embedded model.

Batched and one-token kernels round quantised weights differently, so a tree pass can flip a near-tie that a
one-token pass resolves the other way; the first difference from `ar` must then sit where `ar`'s top two logits
were within the bench's tie margin. On this engine an ``auto`` budget may price every draft out (its batches can
cost nearly their size), which would prove nothing: each speculator runs with a fixed size, so every step drafts.
"""

from __future__ import annotations

import pytest
from conftest import FIRST_OF_EACH_TASK, LOSSLESS_TOKENS, _read, EXAMPLES

from drafting.bench.identity import TIE_MARGIN, first_divergence, tie_check
from drafting.engine.decode import Decoder
from drafting.engine.hooks import RecordMargins
from drafting.models.chat_template import encode
from drafting.speculators import create, registry

pytest.importorskip("llama_cpp")  # the engine is an extra: `make llamacpp-setup`

# the fixed sizes that make each speculator draft on every step (the defaults of the rest draft by themselves)
FIXED = {"pld": "pld:priced=off", "tr": "tr:budget=24", "iso": "iso:budget=24", "goose": "goose:budget=24", "lookahead": "lookahead:rows=16",
         "ptd": "ptd:rows=16"}
SPECS = [FIXED.get(name, name) for name in registry() if name != "ar"]


@pytest.fixture(scope="module")
def prompts(llama_lm):
    recs = _read(EXAMPLES / "prompts.jsonl")[FIRST_OF_EACH_TASK]
    return [(r["id"], encode(llama_lm.tokenizer, [{"role": "user", "content": r["prompt"]}])) for r in recs]


@pytest.fixture(scope="module")
def plain(llama_lm, prompts):
    dec = Decoder(llama_lm, create("ar"), hooks=[RecordMargins()])
    return {pid: dec.generate(ids, LOSSLESS_TOKENS) for pid, ids in prompts}


@pytest.mark.parametrize("spec", SPECS)
def test_speculator_matches_ar_on_llama_cpp_up_to_near_ties(llama_lm, prompts, plain, spec):
    dec = Decoder(llama_lm, create(spec))
    drafted = 0
    for pid, ids in prompts:
        result = dec.generate(ids, LOSSLESS_TOKENS)
        drafted += sum(len(r.tokens) - 1 + len(r.rows["tokens"] if r.rows else []) for r in result.records)
        ref = plain[pid]
        div = first_divergence(ref.output_ids, result.output_ids)
        check = tie_check(div, ref.margins, TIE_MARGIN)
        assert check["exact_up_to_ties"], f"{spec} differs from ar on {pid} at {div} (ar's margin {check['divergence_margin']})"
    assert drafted > 0, f"{spec} drafted nothing, so it proved nothing"
