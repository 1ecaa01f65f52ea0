"""The one interface between the decode loop and an engine that runs the model: ``Forward``.

The loop, the trees, acceptance and sampling know no engine. An engine (transformers in ``drafting/engine/hf``,
llama.cpp in ``drafting/engine/llama``) supplies a ``Forward``: a cache it can hand out, crop and compact, a
prefill, and one pass over a draft (tree nodes and in-model draft rows) that returns a logits row per node.
A ``LoadedModel`` carries the factory of its engine's ``Forward`` (``make_forward``), set by the loader.
"""

from __future__ import annotations

from typing import Protocol

import torch

from drafting.engine.phase_clock import PhaseClock
from drafting.engine.tree import Draft

# The engines goose can verify on, one closed list (the names --engine and engine= take).
TRANSFORMERS = "transformers"
LLAMA_CPP = "llama.cpp"
ENGINES = (TRANSFORMERS, LLAMA_CPP)


class Cache(Protocol):
    """An engine's KV cache handle; the loop only asks how many tokens it holds."""

    def get_seq_length(self) -> int: ...


class Forward(Protocol):
    context: int  # tokens a cache can hold
    clock: PhaseClock  # phase marks that are right on this engine's device
    unsupported: Exception | None  # why trees or draft rows cannot be verified exactly here (None: they can)

    def new_cache(self) -> Cache:
        """An empty cache."""

    def prefill(self, ids: list[int], cache: Cache, logit_rows: int | None = None) -> torch.Tensor:
        """Run ``ids`` as a causal block after the cached prefix; the logits of its last ``logit_rows`` positions
        (None = all; at least the last one), float rows (n, V) on any device."""

    def step(self, draft: Draft, cache: Cache) -> torch.Tensor:
        """Score every tree node and draft row in one pass; logits (draft.size, V). The tensor may be a view of
        the engine's own buffer: it is valid until the next ``prefill`` or ``step`` (no one keeps it longer)."""

    def keep(self, cache: Cache, prefix_len: int, path: list[int]) -> None:
        """After ``step``: keep prefix + the accepted tree nodes (root first) in the cache, drop every other row."""

    def crop(self, cache: Cache, n: int) -> int:
        """Keep the first ``n`` tokens at most (fewer where part of the cache is unfinished: a pass interrupted
        midway); return how many it holds now."""
