"""transformers' own prompt lookup decoding, ``generate(prompt_lookup_num_tokens=10)``: the baseline users
already have, run on the same prompt ids with the same stop rules so benchmarks can put us beside it.

It is not a registry speculator (it drives its own loop); benchmarks know it by the name ``hf-pld``.
"""

from __future__ import annotations

import time

import torch

from .decode import ContextError, GenerationResult
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

    def spec(self) -> str:
        return NAME

    def stats(self) -> dict:
        return {}

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> GenerationResult:
        lm = self.lm
        if not prompt_ids:
            raise ContextError("The prompt is empty.")
        room = lm.max_context - len(prompt_ids)
        if room < 1:
            raise ContextError(
                f"The prompt has {len(prompt_ids)} tokens, more than the model's context window of "
                f"{lm.max_context} leaves room for."
            )
        eos = sorted(lm.eos_ids)
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=lm.device)
        kwargs = dict(
            max_new_tokens=min(max_new_tokens, room),
            prompt_lookup_num_tokens=self.lookup_tokens,
            eos_token_id=eos or None,
            pad_token_id=eos[0] if eos else 0,
            attention_mask=torch.ones_like(ids),
        )
        p = self.params
        if p.greedy:
            kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
        else:
            if p.seed is not None:
                torch.manual_seed(p.seed)
            kwargs.update(do_sample=True, temperature=p.temperature, top_k=p.top_k or None, top_p=p.top_p)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = lm.model.generate(ids, **kwargs)
        wall = time.perf_counter() - t0
        new = [int(t) for t in out[0, len(prompt_ids):].tolist()]
        stop = "max_new_tokens"
        for i, tok in enumerate(new):
            if tok in lm.eos_ids:
                new, stop = new[: i + 1], "eos"
                break
        if stop != "eos" and len(new) < max_new_tokens:
            stop = "context"
        return GenerationResult(prompt_ids=list(prompt_ids), output_ids=new, stop_reason=stop, wall_s=wall)
