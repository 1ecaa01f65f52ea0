"""transformers' ``Forward`` (drafting.engine.forward): one forward pass of the torch model over a draft with the KV
cache, and cache compaction (acceptance is in ``drafting.engine.acceptance``)."""

from __future__ import annotations

import inspect

import torch

from drafting.engine.hf.kv_cache import BufferedLayer, new_cache
from drafting.engine.phase_clock import PhaseClock
from drafting.engine.hf.pinned import Staging, thread_staging
from drafting.errors import UnsupportedModelError
from drafting.engine.hf.model_support import attention_layout
from drafting.engine.tree import Draft
from drafting.engine.hf.step_inputs import step_inputs


class HFForward:
    """Runs the target model over step rows that extend the cached prefix. ``context``: tokens a cache holds (the
    model's window); ``name`` is what a refusal calls the model."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype, device, context: int = 2048,
                 name: str = "the model"):
        self.model = model
        self.dtype = dtype
        self.device = device
        self.context = context
        self.clock = PhaseClock.for_model(model)
        self.can_trim_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        try:  # which layers see a window, so tree masks honour it; a model goose cannot verify trees on runs chains
            self.layout, self.unsupported = attention_layout(model, name), None
        except UnsupportedModelError as exc:
            self.layout, self.unsupported = None, exc

    def new_cache(self):
        return new_cache(self.model.config)

    def keep(self, cache, prefix_len: int, path: list[int]) -> None:
        keep_accepted(cache, prefix_len, path)

    def crop(self, cache, n: int) -> int:
        """Crop every layer to its first ``n`` tokens, or to the shortest layer's length where one holds fewer (a
        step or a crop interrupted midway leaves layers of different lengths, and a layer cropped by a count from
        another's length would keep stale keys or lose good ones); 0 when a layer holds nothing."""
        layers = getattr(cache, "layers", None) or []
        if any(not hasattr(layer, "keys") for layer in layers):  # a recurrent state: transformers' own crop
            extra = cache.get_seq_length() - n
            if extra > 0:
                cache.crop(-extra)
            return cache.get_seq_length()
        if not layers or any(layer.keys is None for layer in layers):
            return 0
        keep = min([n] + [layer.keys.shape[2] for layer in layers])
        for layer in layers:
            extra = layer.keys.shape[2] - keep
            if extra > 0:
                layer.crop(-extra)
        return keep

    @torch.inference_mode()
    def prefill(self, ids: list[int], cache, logit_rows: int | None = None) -> torch.Tensor:
        """Run ``ids`` as a causal block after the cached prefix; return the logits of its last ``logit_rows``
        positions (None = all; at least the last one), the output layer running on those rows only."""
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        trim = logit_rows is not None and logit_rows < len(ids) and self.can_trim_logits
        keep = {"logits_to_keep": max(1, logit_rows)} if trim else {}
        # no position ids: a causal block after the cache is where every model places positions itself, each by
        # its own rule (RoBERTa-style models offset them past the padding index)
        out = self.model(input_ids=x, cache=cache, use_cache=True, **keep)
        return out.logits[0]

    @torch.inference_mode()
    def step(self, draft: Draft, cache) -> torch.Tensor:
        """Score every tree node and draft row in one pass; return logits (draft.size, V)."""
        prefix_len = cache.get_seq_length()
        if self.unsupported is not None and (draft.rows or len(draft.tree) > 1):
            raise self.unsupported
        ids, pos, mask = step_inputs(draft, prefix_len, self.dtype, self.device, self.layout)
        if mask is None:  # a chain after the cache: the model's own positions and mask, as in prefill
            out = self.model(input_ids=ids, cache=cache, use_cache=True)
        else:
            out = self.model(input_ids=ids, position_ids=pos, attention_mask=mask, cache=cache, use_cache=True)
        return out.logits[0]


@torch.inference_mode()  # the cache tensors were made in inference mode; updating them in place needs it too
def keep_accepted(cache, prefix_len: int, path: list[int], staging: Staging | None = None) -> None:
    """Keep prefix + the accepted tree nodes (root first) in the cache; drop every other step row.

    Rows already in place (the accepted path's contiguous start) stay; the rest is moved with one gather per
    layer, from one index tensor copied once per device through ``staging`` (default: this thread's pinned
    buffers)."""
    n_keep = len(path)
    first = next((j for j, node in enumerate(path) if node != j), n_keep)
    if first < n_keep:
        moved = path[first:]
        start = prefix_len + first
        index: dict = {}
        for layer in cache.layers:
            dev = layer.keys.device
            src = index.get(dev)
            if src is None:
                src = index[dev] = (staging or thread_staging()).to_device(moved, dev) + prefix_len
            if isinstance(layer, BufferedLayer):
                layer.keep(start, src)
            else:
                layer.keys[:, :, start : prefix_len + n_keep] = layer.keys.index_select(2, src)
                layer.values[:, :, start : prefix_len + n_keep] = layer.values.index_select(2, src)
    extra = cache.get_seq_length() - (prefix_len + n_keep)
    if extra > 0:
        cache.crop(-extra)
