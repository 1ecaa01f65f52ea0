"""One forward pass over a draft with the KV cache, and cache compaction (acceptance is in ``acceptance``)."""

from __future__ import annotations

import inspect

import torch

from .tree import Draft, step_inputs


class Forward:
    """Runs the target model over step rows that extend the cached prefix."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype, device):
        self.model = model
        self.dtype = dtype
        self.device = device
        self.can_trim_logits = "logits_to_keep" in inspect.signature(model.forward).parameters

    @torch.inference_mode()
    def prefill(self, ids: list[int], cache, logit_rows: int | None = None) -> torch.Tensor:
        """Run ``ids`` as a causal block after the cached prefix; return the logits of its last ``logit_rows``
        positions (None = all; at least the last one), the output layer running on those rows only."""
        start = cache.get_seq_length()
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        pos = torch.arange(start, start + len(ids), device=self.device)[None]
        trim = logit_rows is not None and logit_rows < len(ids) and self.can_trim_logits
        keep = {"logits_to_keep": max(1, logit_rows)} if trim else {}
        out = self.model(input_ids=x, position_ids=pos, cache=cache, use_cache=True, **keep)
        return out.logits[0]

    @torch.inference_mode()
    def step(self, draft: Draft, cache) -> torch.Tensor:
        """Score every tree node and draft row in one pass; return logits (draft.size, V)."""
        prefix_len = cache.get_seq_length()
        ids, pos, mask = step_inputs(draft, prefix_len, self.dtype, self.device)
        out = self.model(input_ids=ids, position_ids=pos, attention_mask=mask, cache=cache, use_cache=True)
        return out.logits[0]


@torch.inference_mode()  # the cache tensors were made in inference mode; updating them in place needs it too
def keep_accepted(cache, prefix_len: int, path: list[int]) -> None:
    """Keep prefix + the accepted tree nodes (root first) in the cache; drop every other step row."""
    n_keep = len(path)
    if path != list(range(n_keep)):
        src = torch.tensor(path, dtype=torch.long) + prefix_len
        for layer in cache.layers:
            dev = layer.keys.device
            s = src.to(dev)
            layer.keys[:, :, prefix_len : prefix_len + n_keep] = layer.keys.index_select(2, s)
            layer.values[:, :, prefix_len : prefix_len + n_keep] = layer.values.index_select(2, s)
    extra = cache.get_seq_length() - (prefix_len + n_keep)
    if extra > 0:
        cache.crop(-extra)
