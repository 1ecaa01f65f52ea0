"""`pld` is token-identical to plain decoding on real prompts with the embedded model."""

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["pld", "pld:max_ngram=4,min_ngram=1,draft=6,gate=off"])
def test_pld_matches_ar(assert_lossless, spec):
    assert_lossless(spec)
