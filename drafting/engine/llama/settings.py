"""The llama.cpp engine's knobs, in one frozen dataclass checked when it is made (one sentence per bad value)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# llama.cpp's own bound on sequence ids (LLAMA_MAX_SEQ): a tree step tags each leaf with one, so this many leaves
# at most, less the ones the caches in use hold
MAX_SEQUENCES = 256


def default_threads() -> int:
    """Threads llama.cpp decodes with when none are asked for: what torch would use (one per physical core), so
    the two engines and the reference rows of one bench run on the same cores."""
    return max(1, torch.get_num_threads())


@dataclass(frozen=True)
class LlamaSettings:
    """``context``: tokens the KV cache holds (at most the model's trained window); ``batch``: the most tokens one
    ``llama_decode`` takes (a prefill is cut into such pieces; no draft may be larger); ``threads``: decoding
    threads (None: ``default_threads()``); ``gpu_layers``: layers offloaded to a GPU (-1 all; 0 on a CPU build);
    ``sequences``: sequence ids the context keeps apart (leaves of a tree step plus the caches in use)."""

    context: int = 4096
    batch: int = 256
    threads: int | None = None
    gpu_layers: int = 0
    sequences: int = MAX_SEQUENCES

    def __post_init__(self):
        if not isinstance(self.context, int) or self.context < 16:
            raise ValueError(f"The llama.cpp context must hold at least 16 tokens, not {self.context!r}.")
        if not isinstance(self.batch, int) or not 1 <= self.batch <= self.context:
            raise ValueError(f"The llama.cpp batch must be between 1 and the context ({self.context}) tokens, not {self.batch!r}.")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"llama.cpp threads must be a positive whole number, not {self.threads!r}.")
        if not isinstance(self.gpu_layers, int) or self.gpu_layers < -1:
            raise ValueError(f"llama.cpp GPU layers must be -1 (all), 0 or a number of layers, not {self.gpu_layers!r}.")
        if not isinstance(self.sequences, int) or not 2 <= self.sequences <= MAX_SEQUENCES:
            raise ValueError(f"llama.cpp sequences must be between 2 and {MAX_SEQUENCES}, not {self.sequences!r}.")
        if self.sequences > self.batch:  # llama.cpp aborts the process making such a context (its output buffer)
            raise ValueError(f"llama.cpp sequences ({self.sequences}) must be at most the batch ({self.batch}).")

    @property
    def thread_count(self) -> int:
        return self.threads if self.threads is not None else default_threads()
