"""What the bench asks of a baseline: plain decoding or prompt lookup as users already have it, run on the same
prompts beside goose's speculators and timed the same way."""

from __future__ import annotations

from typing import Protocol

import torch

from drafting.engine.decode import GenerationResult


class Baseline(Protocol):
    name: str
    external: bool  # another engine: timed beside goose's rows, never compared token by token
    same_network: bool  # runs the very weights goose verifies with (else its tokens are not compared)
    model: torch.nn.Module | None  # the torch module whose forwards the bench times (None: not torch)
    # a baseline that may run elsewhere than goose's model (llama.cpp's rows) also says where: ``device``, a torch
    # device type (cpu, cuda); without it, it runs where goose's model is

    def spec(self) -> str:
        """The name the bench lists it under."""

    def stats(self) -> dict:
        """Running counters (the bench reports their growth per run)."""

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> GenerationResult:
        """One answer to ``prompt_ids``, stopped by the same rules as goose's (drafting.engine.stop_rules)."""
