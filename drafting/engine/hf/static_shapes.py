"""Static step shapes (opt-in, not yet measured on a GPU): a KV cache preallocated to a fixed context and tree
sizes rounded up to a few buckets, so every step forward has one of a few fixed shapes that CUDA graphs can
capture (``torch.compile(mode="reduce-overhead")``) and replay without per-kernel launch costs.

Each step attends over the whole preallocated cache; columns past the filled part are hidden by the mask, and
padding rows (bucket minus real rows) only see themselves, so they never change a real row's logits. Their KV
is written past the end and overwritten later. The cache is allocated once per model and reused across
prompts (and decoders), because a compiled step is specialised on the cache object it was traced with; it lives
as long as a decoder uses it, so dropping the model and its decoders frees both.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from drafting.engine.tree import Draft
from drafting.engine.hf.step_inputs import step_inputs
from drafting.engine.hf.forward import HFForward

DEFAULT_BUCKETS = (1, 4, 16, 64, 128)

# Tokens the static cache holds when the option names none. Not the model's whole window: some models state
# 128k tokens, and every step attends over the whole preallocated cache, so a window-sized buffer would cost
# that memory and that attention on every step of every prompt. Longer contexts are asked for by name.
DEFAULT_CONTEXT = 4096


class StaticShapeError(ValueError):
    """The static-shapes option cannot serve this model or setting; one sentence."""


@dataclass(frozen=True)
class StaticShapes:
    """The option: step row counts are rounded up to one of ``buckets``; ``compile`` wraps the step forward in
    ``torch.compile(mode="reduce-overhead")`` (CUDA graphs; meant for CUDA)."""

    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    compile: bool = False
    context: int | None = None  # tokens the cache holds (None = DEFAULT_CONTEXT, at most the model's window); every step attends to all

    def bucket(self, n: int) -> int:
        for b in self.buckets:
            if n <= b:
                return b
        top = self.buckets[-1]
        return -(-n // top) * top  # beyond the largest bucket: a multiple of it (one more shape)


class FixedLayer(DynamicLayer):
    """A layer whose ``keys``/``values`` are the whole preallocated buffers. ``write_at`` (a device tensor the
    step fills before each forward) says where the new rows go; ``length`` (host side) how many are valid."""

    is_croppable = True

    def __init__(self, capacity: int, write_at: torch.Tensor):
        super().__init__()
        self.capacity = capacity
        self.write_at = write_at
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        shape_k = (*key_states.shape[:2], self.capacity, key_states.shape[3])
        shape_v = (*value_states.shape[:2], self.capacity, value_states.shape[3])
        self.keys = torch.zeros(shape_k, dtype=key_states.dtype, device=self.device)
        self.values = torch.zeros(shape_v, dtype=value_states.dtype, device=self.device)
        if hasattr(torch, "_dynamo"):  # a fixed address lets a captured graph write into the cache in place
            torch._dynamo.mark_static_address(self.keys)
            torch._dynamo.mark_static_address(self.values)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        at = self.write_at[: key_states.shape[2]]
        self.keys.index_copy_(2, at, key_states)
        self.values.index_copy_(2, at, value_states)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.capacity

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.capacity, 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count: the number of tokens to drop from the end.")
        self.length = max(0, self.length + tokens_to_remove)  # stale rows stay, hidden by the mask

    def reset(self) -> None:
        self.length = 0  # the buffers stay: stale rows are hidden by the mask and overwritten


# (id of the model, option) -> its StaticForward, held by the decoders using it; the table holds it weakly, since a
# StaticForward holds its model (a table that held it would keep every model alive for the life of the process)
_SHARED: "weakref.WeakValueDictionary[tuple, StaticForward]" = weakref.WeakValueDictionary()


class StaticForward(HFForward):
    """``HFForward`` with fixed shapes: ``new_cache()`` hands out the one preallocated cache; ``step`` pads the
    draft to its bucket. Prefill runs eagerly (its length varies per prompt) into the same buffers."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype, device, max_context: int, shapes: StaticShapes):
        super().__init__(model, dtype, device, max_context)
        if not shapes.buckets or list(shapes.buckets) != sorted(set(shapes.buckets)) or shapes.buckets[0] < 1:
            raise StaticShapeError("Static-shape buckets must be distinct positive row counts in increasing order.")
        if getattr(model.config, "sliding_window", None) or getattr(model.config, "attention_chunk_size", None):
            raise StaticShapeError("Static shapes need a model whose every layer attends to the whole context.")
        self.shapes = shapes
        self.context = min(max_context, shapes.context or DEFAULT_CONTEXT)
        self.capacity = self.context + max(shapes.buckets)
        self.write_at = torch.zeros(self.capacity, dtype=torch.long, device=device)
        if hasattr(torch, "_dynamo"):
            torch._dynamo.mark_static_address(self.write_at)  # filled in place before each step, never copied
        self._cache: DynamicCache | None = None
        self._masks: dict[int, torch.Tensor] = {}
        self.step_model = model
        if shapes.compile:
            self.step_model = torch.compile(model, mode="reduce-overhead", dynamic=False)

    @classmethod
    def shared(cls, lm, shapes: StaticShapes) -> "StaticForward":
        """One per model and option, shared by its decoders (which run one at a time): one cache, one compile."""
        key = (id(lm.model), shapes)
        shared = _SHARED.get(key)
        if shared is None or shared.model is not lm.model:  # a live one holds its model, so ids match only it
            shared = _SHARED[key] = cls(lm.model, lm.dtype, lm.device, lm.max_context, shapes)
        return shared

    def new_cache(self) -> DynamicCache:
        if self._cache is None:
            cache = DynamicCache(config=self.model.config)
            cache.layers = [FixedLayer(self.capacity, self.write_at) for _ in cache.layers]
            self._cache = cache
        for layer in self._cache.layers:
            layer.reset()
        return self._cache

    def crop(self, cache, n: int) -> int:
        keep = min([n] + [layer.length for layer in cache.layers])
        self._set_length(cache, keep)  # stale rows stay, hidden by the mask
        return keep

    def _set_length(self, cache, n: int) -> None:
        for layer in cache.layers:
            layer.length = n

    @torch.inference_mode()
    def prefill(self, ids: list[int], cache, logit_rows: int | None = None) -> torch.Tensor:
        start = cache.get_seq_length()
        n = len(ids)
        self.write_at[:n] = torch.arange(start, start + n, device=self.device)
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        pos = torch.arange(start, start + n, device=self.device)[None]
        col = torch.arange(self.capacity, device=self.device)
        seen = col[None, :] <= pos[0, :, None]  # causal over the prefix and the block itself
        mask = torch.zeros((1, 1, n, self.capacity), dtype=self.dtype, device=self.device)
        mask.masked_fill_(~seen[None, None], torch.finfo(self.dtype).min)
        trim = logit_rows is not None and logit_rows < n and self.can_trim_logits
        keep = {"logits_to_keep": max(1, logit_rows)} if trim else {}
        out = self.model(input_ids=x, position_ids=pos, attention_mask=mask, cache=cache, use_cache=True, **keep)
        self._set_length(cache, start + n)
        return out.logits[0]

    @torch.inference_mode()
    def step(self, draft: Draft, cache) -> torch.Tensor:
        prefix = cache.get_seq_length()
        ids, pos, block = step_inputs(draft, prefix, self.dtype, self.device)
        n = ids.shape[1]
        b = self.shapes.bucket(n)
        if prefix + b > self.capacity:
            raise StaticShapeError(f"A {b}-row step after {prefix} cached tokens does not fit the static cache.")
        x = torch.zeros((1, b), dtype=torch.long, device=self.device)
        x[:, :n] = ids
        p = torch.full((1, b), prefix, dtype=torch.long, device=self.device)
        p[:, :n] = pos
        self.write_at[:b] = torch.arange(prefix, prefix + b, device=self.device)
        mask = self._mask(b, n, prefix, block)
        if self.shapes.compile:
            torch.compiler.cudagraph_mark_step_begin()  # a new step: the last replay's outputs may be overwritten
        out = self.step_model(input_ids=x, position_ids=p, attention_mask=mask, cache=cache, use_cache=True)
        self._set_length(cache, prefix + n)
        logits = out.logits[0, :n]
        # a replayed graph writes its next logits into the same buffer; speculators may keep this step's
        return logits.clone() if self.shapes.compile else logits

    def _mask(self, b: int, n: int, prefix: int, block: torch.Tensor | None) -> torch.Tensor:
        """(1, 1, b, capacity): the prefix for real rows, their tree block, and only itself for a padding row."""
        mask = self._masks.get(b)
        if mask is None:
            mask = self._masks[b] = torch.empty((1, 1, b, self.capacity), dtype=self.dtype, device=self.device)
        low = torch.finfo(self.dtype).min
        mask.fill_(low)
        mask[0, 0, :n, :prefix] = 0
        if block is None:  # a chain: causal within the step
            later = torch.ones((n, n), dtype=torch.bool, device=self.device).triu_(1)
            mask[0, 0, :n, prefix : prefix + n] = 0
            mask[0, 0, :n, prefix : prefix + n].masked_fill_(later, low)
        else:
            mask[0, 0, :n, prefix : prefix + n] = block[0, 0, :, prefix:]
        pad = torch.arange(n, b, device=self.device)
        mask[0, 0, pad, prefix + pad] = 0
        return mask[:, :, :, :]  # a fresh view each step: per-step mask caches key on the tensor object
