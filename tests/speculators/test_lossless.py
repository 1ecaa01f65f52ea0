"""Every registered speculator, and the non-default settings worth proving, is token-identical to plain decoding
on the real prompts with the embedded model (greedy, float32).

The defaults run on all twelve prompts: `make test` takes the first prompt of each task group, the heavy tier the
second, so CI proves all twelve and a developer's run takes half the time.
"""

import pytest
from conftest import FIRST_OF_EACH_TASK, SECOND_OF_EACH_TASK

from drafting.speculators import registry

# settings other than the defaults whose paths the defaults do not take; each runs on one prompt per task group
# in the heavy tier, since the paths they add are taken on every prompt
VARIANTS = [
    "pld:max_ngram=4,min_ngram=1,draft=6,gate=off",
    "pld:aligned=on",
    "iso:k=5,budget=60",
    # the paper's budget with all four ablation switches at once (each switch alone runs on the tiny model)
    "goose:budget=60,rho=0,bigram=off,confidence=off,harvest=off",
    "lookahead:rows=16",
    "ptd:rows=16",
]


SPECULATORS = [name for name in registry() if name != "ar"]


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECULATORS)
def test_speculator_matches_ar(assert_lossless, spec):
    assert_lossless(spec, FIRST_OF_EACH_TASK)


@pytest.mark.heavy
@pytest.mark.parametrize("spec", SPECULATORS)
def test_speculator_matches_ar_on_the_other_prompts(assert_lossless, spec):
    assert_lossless(spec, SECOND_OF_EACH_TASK)


@pytest.mark.heavy
@pytest.mark.parametrize("spec", VARIANTS)
def test_setting_variant_matches_ar(assert_lossless, spec):
    assert_lossless(spec, FIRST_OF_EACH_TASK)
