"""transformers' own prompt lookup decoding, ``generate(prompt_lookup_num_tokens=10)``: the baseline users
already have, on the model exactly as transformers loads it (the unmodified instance of drafting.baselines.hf_generate,
shared with ``hf-ar``), run on the same prompt ids with the same stop rules so benchmarks can put us beside it.

It is not a registry speculator (it drives its own loop); benchmarks know it by the name ``hf-pld``.
"""

from __future__ import annotations

from drafting.baselines.hf_generate import HFGenerate
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.sampling_params import SamplingParams

NAME = "hf-pld"
LOOKUP_TOKENS = 10


class HFPromptLookup(HFGenerate):
    """Generates with ``model.generate(prompt_lookup_num_tokens=...)``; greedy unless sampling is asked for."""

    name = NAME

    def __init__(self, lm: LoadedModel, params: SamplingParams | None = None, lookup_tokens: int = LOOKUP_TOKENS):
        super().__init__(lm, params)
        self.lookup_tokens = lookup_tokens

    def generate_options(self) -> dict:
        return {"prompt_lookup_num_tokens": self.lookup_tokens}
