"""Attention for tree steps of grouped-query models on CPU without copying the KV cache.

transformers' SDPA path, given an explicit mask and more than one query row (every tree or draft-row step),
repeats each key/value head once per query head in its group, copying the whole cache in every layer, every
step. Here the query heads of a group are stacked along the row axis instead (the mask, shared by all heads, is
stacked with them), so attention reads the cache as it is. One-row steps without a mask (plain decoding) are
stacked too, because torch's grouped (``enable_gqa``) CPU kernel is slower than the stacked call. The path is
switched on only for models on CPU, where it was measured to win (docs/models.md); on CUDA the model keeps
transformers' SDPA, whose kernels take the narrow (1, 1, n, keys) tree mask and no mask at all for one-row steps.

The grouped call implements only the keyword arguments below; any other argument with a value (attention
sinks, soft-capping, position bias, dropout in training, a window without a mask that applies it, ...) sends the
call to transformers' own SDPA unchanged, never dropped. Causal blocks without a mask (prefill) and masks that
differ per head take that path too.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "goose_grouped_sdpa"

# bookkeeping arguments models pass along that do not change what attention computes
IGNORED = frozenset({"position_ids", "use_cache", "cache_position", "output_attentions", "cache"})


def _grouped_can_take(kwargs: dict, masked: bool) -> bool:
    for key, value in kwargs.items():
        if key in IGNORED or value is None:
            continue
        if key == "sliding_window" and masked:
            continue  # the mask (goose's tree mask or transformers' windowed mask) applies the window
        return False
    return True


def grouped_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, rows, dim = query.shape
    one_mask = attention_mask is not None and attention_mask.dim() == 4 and attention_mask.shape[1] == 1
    unmasked_row = attention_mask is None and rows == 1  # a plain decoding step: nothing to mask, nothing causal
    if (groups == 1 or dropout != 0.0 or not (one_mask or unmasked_row)
            or not (kwargs.keys() <= IGNORED or _grouped_can_take(kwargs, one_mask))):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    # head h = g * groups + r reads KV head g; stack its query rows as r * rows + i
    stacked = query.reshape(batch, heads // groups, groups * rows, dim)
    mask = stacked_mask(attention_mask, groups) if one_mask else None
    out = torch.nn.functional.scaled_dot_product_attention(stacked, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(batch, heads, rows, dim).transpose(1, 2).contiguous(), None


_recent: list = []  # (mask, groups, its stacked copy) for the masks of the current step, newest last
_RECENT = 4  # a step hands out one mask per layer type


def stacked_mask(mask: torch.Tensor, groups: int) -> torch.Tensor:
    """The mask repeated once per query head of a group. Every layer of a type gets the same mask tensor in a
    step, so the copy is made once per step and layer type, not once per layer."""
    for last, last_groups, out in _recent:
        if last is mask and last_groups == groups:
            return out
    out = mask.repeat(1, 1, groups, 1)
    _recent.append((mask, groups, out))
    del _recent[:-_RECENT]
    return out


AttentionInterface.register(NAME, grouped_sdpa)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


def use_grouped_attention(net: torch.nn.Module) -> None:
    """Switch ``net`` to the grouped path when it runs transformers' SDPA with grouped KV heads on CPU."""
    config = net.config
    kv = getattr(config, "num_key_value_heads", None)
    on_cpu = all(p.device.type == "cpu" for p in net.parameters())
    if on_cpu and getattr(config, "_attn_implementation", None) == "sdpa" and kv and kv < config.num_attention_heads:
        net.set_attn_implementation(NAME)
