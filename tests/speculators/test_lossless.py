"""Every registered speculator, and the non-default settings worth proving, is token-identical to plain decoding
on the real prompts with the embedded model (greedy, float32)."""

import pytest

from drafting.speculators import registry

# settings other than the defaults whose paths the defaults do not take; each runs on one prompt per task group
# (the defaults run on all twelve), since the paths they add are taken on every prompt
VARIANTS = [
    "pld:max_ngram=4,min_ngram=1,draft=6,gate=off",
    "iso:k=5,budget=60",
    # the paper's budget with all four ablation switches at once (each switch alone runs on the tiny model)
    "goose:budget=60,rho=0,bigram=off,confidence=off,harvest=off",
    "lookahead:rows=16",
    "ptd:rows=16",
]


@pytest.mark.slow
@pytest.mark.parametrize("spec", [name for name in registry() if name != "ar"])
def test_speculator_matches_ar(assert_lossless, spec):
    assert_lossless(spec)


@pytest.mark.slow
@pytest.mark.parametrize("spec", VARIANTS)
def test_setting_variant_matches_ar(assert_lossless, spec):
    assert_lossless(spec, one_per_task=True)
