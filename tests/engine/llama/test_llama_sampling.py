"""Lossless sampling on llama.cpp: continuations sampled through speculators that draft chains, trees and in-model
rows follow the exact distribution of plain sampling on the same engine (chi-square against an enumeration).

The small F16 GGUF under top-k 4 makes a 2-token continuation one of 16 outcomes, each computed exactly from
one-token passes; the prompt is the model's own greedy text, which repeats, so drafts are offered and both
accepted and rejected (checked, else the test would prove nothing).
"""

from __future__ import annotations

from collections import Counter

import pytest
from support.one_token import sequential
from support.sampling_reference import chi_square, reference_warp

from drafting.engine.acceptance import make_acceptor
from drafting.engine.decode import Decoder
from drafting.engine.sampling_params import SamplingParams
from drafting.speculators import create

pytest.importorskip("llama_cpp")  # the engine is an extra: `make llamacpp-setup`

LENGTH = 2
SAMPLES = 1000
PARAMS = SamplingParams(temperature=1.0, top_k=4, seed=21)
# fixed sizes: what a measured cost curve would draft varies by machine (priced pld drafted nothing on an
# AVX-512 EPYC, and the test then proved nothing)
SPECS = ["pld:gate=off,priced=off,min_ngram=1", "goose:budget=8,harvest_window=4", "ptd:rows=8"]
ALPHA = 1e-3 / len(SPECS)


@pytest.fixture(scope="module")
def prompt(small_llama) -> list[int]:
    start = small_llama.tokenizer("def add(a, b):\n    return a + b\n\ndef add(a, b):")["input_ids"]
    out = Decoder(small_llama, create("ar")).generate(start, 40).output_ids
    return start + out


def exact_distribution(lm, prompt: list[int]) -> dict[tuple, float]:
    fwd = lm.make_forward(lm, None)
    cache = fwd.new_cache()
    fwd.prefill(prompt[:-1], cache)
    n = len(prompt) - 1
    first = reference_warp(sequential(lm, cache, n, [prompt[-1]])[-1].tolist(), PARAMS.temperature, PARAMS.top_k)
    probs = {}
    for a, pa in enumerate(first):
        if pa > 0:
            second = reference_warp(sequential(lm, cache, n, [prompt[-1], a])[-1].tolist(), PARAMS.temperature,
                                    PARAMS.top_k)
            probs.update({(a, b): pa * pb for b, pb in enumerate(second) if pb > 0})
    return probs


@pytest.mark.parametrize("spec", SPECS)
def test_sampled_continuations_follow_plain_sampling(small_llama, prompt, spec):
    exact = exact_distribution(small_llama, prompt)
    assert abs(sum(exact.values()) - 1.0) < 1e-9 and len(exact) == 16
    decoder = Decoder(small_llama, create(spec), acceptor=make_acceptor(PARAMS))
    counts: Counter = Counter()
    offered = accepted = rejected = 0
    for _ in range(SAMPLES):
        result = decoder.generate(prompt, LENGTH)
        counts[tuple(result.output_ids)] += 1
        for rec in result.records:
            offered += len(rec.tokens) - 1
            accepted += len(rec.accepted) - 1
            rejected += rec.accepted[-1] in rec.parents
    stat, df, p_value = chi_square(counts, exact)
    assert p_value > ALPHA, f"{spec}: chi-square {stat:.1f} on {df} df, p = {p_value:.2e}"
    assert offered and accepted and rejected, f"{spec} did not exercise verification: {offered, accepted, rejected}"
