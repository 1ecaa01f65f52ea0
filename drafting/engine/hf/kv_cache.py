"""A KV cache that writes into preallocated buffers instead of concatenating on every forward.

transformers' ``DynamicCache`` grows each layer with ``torch.cat``, which copies the whole cache every step.
Here each layer keeps one buffer with spare room (grown by doubling) holding keys and values side by side, and
exposes views of its filled part, so a step writes only its new rows, cropping rejected tree rows is free, and
keeping an accepted tree path is one gather per layer. Doubling stops at the model's context length: a decoder
never holds more (its steps are cut to the room left), so a buffer past it would be memory never written.

Sliding-window layers are kept whole as well: transformers' sliding layers drop tokens that fell out of the
window, and after a tree step (rows past the window's end, then compaction) they would no longer hold the
tokens sequential decoding sees. The window is applied by the mask instead (drafting.engine.hf.step_inputs.tree_mask and the
model's own mask for chains), so a windowed layer costs the memory of a full one.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

INITIAL_CAPACITY = 1024

# cache layers whose content is a plain sequence of keys and values, so a buffered full layer can stand in
REPLACEABLE = (DynamicLayer, DynamicSlidingWindowLayer)


class BufferedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``keys``/``values`` are views of one preallocated buffer (two if their shapes
    differ). ``limit``: the most tokens it is grown to by doubling (None = no limit); a need beyond it is met
    exactly at first, then by doubling again (a caller that runs past the model's context, such as a cost
    measurement, still gets room)."""

    def __init__(self, limit: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.limit = limit

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self._kv = self._k = self._v = None
        self.keys = key_states[:, :, :0]
        self.values = value_states[:, :, :0]
        self.is_initialized = True

    def _capacity(self) -> int:
        if self._kv is not None:
            return self._kv.shape[3]
        return self._k.shape[2] if self._k is not None else 0

    def _view(self, length: int) -> None:
        if self._kv is not None:
            self.keys, self.values = self._kv[0, :, :, :length], self._kv[1, :, :, :length]
        else:
            self.keys, self.values = self._k[:, :, :length], self._v[:, :, :length]

    def _reserve(self, need: int, like_k: torch.Tensor, like_v: torch.Tensor) -> None:
        if self._capacity() >= need:
            return
        cap = max(INITIAL_CAPACITY, need, 2 * self._capacity())
        if self.limit is not None and need <= self.limit:
            cap = min(cap, self.limit)
        n = self.keys.shape[2]
        old_k, old_v = self.keys, self.values
        if like_k.shape == like_v.shape and like_k.dtype == like_v.dtype:
            self._kv = like_k.new_empty((2, *like_k.shape[:2], cap, like_k.shape[3]))
        else:
            self._k = like_k.new_empty((*like_k.shape[:2], cap, like_k.shape[3]))
            self._v = like_v.new_empty((*like_v.shape[:2], cap, like_v.shape[3]))
        self._view(n)
        if n:
            self.keys.copy_(old_k)
            self.values.copy_(old_v)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, m = self.keys.shape[2], key_states.shape[2]
        self._reserve(n + m, key_states, value_states)
        self._view(n + m)
        self.keys[:, :, n:].copy_(key_states)
        self.values[:, :, n:].copy_(value_states)
        return self.keys, self.values

    def keep(self, start: int, src: torch.Tensor) -> None:
        """Move the rows at sequence indices ``src`` (on this layer's device) to ``start``, ``start + 1``, ...
        and drop everything after them."""
        end = start + src.numel()
        if self._kv is not None:
            self._kv[:, :, :, start:end] = self._kv.index_select(3, src)
        else:
            self._k[:, :, start:end] = self._k.index_select(2, src)
            self._v[:, :, start:end] = self._v.index_select(2, src)
        self._view(end)

    def reset(self) -> None:
        self._kv = self._k = self._v = None
        super().reset()


def context_length(config) -> int | None:
    """The model's context window as its config states it (``max_position_embeddings``, which configs with
    another name for it map to), None when it states none (ALiBi and recurrent models have no fixed window)."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    found = getattr(text, "max_position_embeddings", None)
    return int(found) if isinstance(found, int) and found > 0 else None


def new_cache(config, max_tokens: int | None = None) -> DynamicCache:
    """A ``DynamicCache`` for ``config`` whose attention layers (full and sliding-window) are buffered and kept
    whole, each grown up to ``max_tokens`` (default: the model's context length); other kinds of layer (refused
    for tree steps by drafting.engine.hf.model_support) keep transformers' own."""
    limit = max_tokens if max_tokens is not None else context_length(config)
    cache = DynamicCache(config=config)
    cache.layers = [BufferedLayer(limit) if type(layer) in REPLACEABLE else layer for layer in cache.layers]
    return cache
