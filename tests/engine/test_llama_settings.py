"""The llama.cpp engine's knobs refuse bad values in one sentence, before llama.cpp sees them (some it would
answer by aborting the process)."""

import pytest

from drafting.engine.llama.settings import LlamaSettings


@pytest.mark.parametrize("kwargs, says", [
    ({"context": 8}, "at least 16 tokens"),
    ({"batch": 0}, "batch must be between 1"),
    ({"threads": 0}, "positive whole number"),
    ({"gpu_layers": -2}, "GPU layers"),
    ({"sequences": 1}, "sequences must be between 2"),
    ({"batch": 64}, r"sequences \(256\) must be at most the batch \(64\)"),  # llama.cpp's GGML_ASSERT otherwise
])
def test_bad_llama_settings_are_refused_in_one_sentence(kwargs, says):
    with pytest.raises(ValueError, match=says) as err:
        LlamaSettings(**kwargs)
    assert str(err.value).count(". ") == 0 and str(err.value).endswith(".")


def test_a_small_batch_runs_with_as_few_sequences():
    assert LlamaSettings(batch=64, sequences=64).batch == 64
