"""`lookahead` and `ptd` are token-identical to plain decoding on the real prompts with the embedded model."""

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["lookahead:rows=16", "ptd:rows=16", "ptd"])
def test_inmodel_drafting_matches_ar(assert_lossless, spec):
    assert_lossless(spec)
