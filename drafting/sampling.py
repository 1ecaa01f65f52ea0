"""Sampling settings and the acceptor that verifies a draft tree under them.

Temperature 0 is greedy decoding. Lossless tree sampling (REFERENCE §6) lands here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .decode import Acceptor, greedy_acceptor


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
        if self.temperature < 0:
            raise ValueError("--temperature must be 0 (greedy) or positive.")
        if self.top_k < 0:
            raise ValueError("--top-k must be 0 (off) or a positive number of tokens.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("--top-p must be in (0, 1].")


def make_acceptor(params: SamplingParams) -> Acceptor:
    """The acceptor for these settings: greedy walk at temperature 0."""
    params.check()
    if params.greedy:
        return greedy_acceptor
    raise NotImplementedError("sampling (temperature > 0) is not built yet")
