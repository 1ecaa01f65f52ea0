"""Sampling settings: temperature, top-k, top-p and seed, and the one sentence for each impossible value.

Pure Python (no torch), so a command can refuse a bad value before it loads anything; the warped target
distribution these settings define is ``drafting.engine.sampling``. Temperature 0 is greedy decoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The smallest temperature above 0: logits / temperature stays far inside float32's range for any real logit
# (1e38 over 1e-6 would need logits of 1e32), while below it the division overflows into inf and the warped
# distribution turns to NaN; at that point it is greedy's anyway, and 0 is greedy exactly.
MIN_TEMPERATURE = 1e-6
# torch.Generator.manual_seed takes 64 bits; it reads a negative seed modulo 2**64 (torch.manual_seed differently),
# so a negative one would not name one stream of numbers.
SEED_LIMIT = 2**64


def temperature_problem(temperature: float) -> str | None:
    """What a temperature that cannot be sampled with must be instead ("must be ..."); None where it can."""
    if not math.isfinite(temperature) or temperature < 0:
        return "must be 0 (greedy) or a positive finite number"
    if 0 < temperature < MIN_TEMPERATURE:
        return f"must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, where logits / temperature still fit in float32"
    return None


def seed_in_range(seed: int) -> bool:
    return 0 <= seed < SEED_LIMIT


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0  # 0 = no top-k cut
    top_p: float = 1.0  # 1 = no nucleus cut
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def check(self) -> None:
        """Raise ValueError (one sentence) for impossible settings."""
        problem = temperature_problem(self.temperature)
        if problem:
            raise ValueError(f"--temperature {problem}, not {self.temperature:g}.")
        if self.top_k < 0:
            raise ValueError("--top-k must be 0 (off) or a positive number of tokens.")
        if not 0.0 < self.top_p <= 1.0:  # NaN fails the comparison too
            raise ValueError("--top-p must be in (0, 1].")
        if self.seed is not None and not seed_in_range(self.seed):
            raise ValueError(f"--seed must be a whole number from 0 to 2**64 - 1, not {self.seed}.")

    def describe(self) -> str:
        """Short text for summaries: 'greedy' or 'T=0.7 top-k=50 top-p=0.9 seed=1'."""
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        if self.top_k:
            parts.append(f"top-k={self.top_k}")
        if self.top_p < 1.0:
            parts.append(f"top-p={self.top_p:g}")
        if self.seed is not None:
            parts.append(f"seed={self.seed}")
        return " ".join(parts)
