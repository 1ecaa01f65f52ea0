"""transformers' own prompt lookup decoding, ``generate(prompt_lookup_num_tokens=10)``: the baseline users
already have, on the model exactly as transformers loads it (the unmodified instance of drafting.hf_generate,
shared with ``hf-ar``), run on the same prompt ids with the same stop rules so benchmarks can put us beside it.

It is not a registry speculator (it drives its own loop); benchmarks know it by the name ``hf-pld``.
"""

from __future__ import annotations

from .decode import GenerationResult
from .hf_generate import plain_model, run_generate, same_network
from .model import LoadedModel
from .sampling import SamplingParams

NAME = "hf-pld"
LOOKUP_TOKENS = 10


class HFPromptLookup:
    """Generates with ``model.generate(prompt_lookup_num_tokens=...)``; greedy unless sampling is asked for."""

    name = NAME

    def __init__(self, lm: LoadedModel, params: SamplingParams | None = None, lookup_tokens: int = LOOKUP_TOKENS):
        self.lm = lm
        self.params = params or SamplingParams()
        self.lookup_tokens = lookup_tokens
        self.model = plain_model(lm)
        self.same_network = same_network(lm)

    def spec(self) -> str:
        return NAME

    def stats(self) -> dict:
        return {}

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> GenerationResult:
        return run_generate(self.model, self.lm, self.params, prompt_ids, max_new_tokens,
                            prompt_lookup_num_tokens=self.lookup_tokens)
