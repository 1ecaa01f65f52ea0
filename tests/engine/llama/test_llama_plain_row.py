"""The ``llama.cpp`` reference row (llama.cpp's own greedy loop) on the llama.cpp engine: it runs on the weights the
engine already holds, not a second copy of them, and it decodes what our ``ar`` decodes up to near-ties (same
kernels and one-token steps, but another context: a layout of its own, so its sums may round a near-tie the other way)."""

from __future__ import annotations

import pytest
from conftest import FIRST_OF_EACH_TASK, LOSSLESS_TOKENS, _read, EXAMPLES

from drafting.bench.identity import TIE_MARGIN, first_divergence, tie_check
from drafting.engine.decode import Decoder
from drafting.engine.hooks import RecordMargins
from drafting.models.chat_template import encode
from drafting.speculators import create

pytest.importorskip("llama_cpp")  # the engine is an extra: `make llamacpp-setup`


def test_plain_row_shares_the_engines_weights_and_decodes_like_ar(llama_lm):
    from drafting.baselines.llama_cpp_plain import LlamaCppPlainRunner

    row = LlamaCppPlainRunner(llama_lm)
    try:
        assert row.owner is llama_lm.model  # one copy of the weights in the process, not two
        dec = Decoder(llama_lm, create("ar"), hooks=[RecordMargins()])
        for rec in _read(EXAMPLES / "prompts.jsonl")[FIRST_OF_EACH_TASK][:3]:  # code, code, maths
            ids = encode(llama_lm.tokenizer, [{"role": "user", "content": rec["prompt"]}])
            ours = dec.generate(ids, LOSSLESS_TOKENS)
            theirs = row.generate(ids, LOSSLESS_TOKENS)
            assert theirs.prompt_ids == ids and theirs.output_ids
            check = tie_check(first_divergence(ours.output_ids, theirs.output_ids), ours.margins, TIE_MARGIN)
            assert check["exact_up_to_ties"], f"llama.cpp's loop left ar on {rec['id']} at a margin of {check['divergence_margin']}"
        assert row.decode_calls > LOSSLESS_TOKENS  # one decode per token after the prefill: it really ran
    finally:
        row.close()
    # the engine's weights outlive the row's context
    assert Decoder(llama_lm, create("ar")).generate(ids, 4).output_ids == ours.output_ids[:4]
