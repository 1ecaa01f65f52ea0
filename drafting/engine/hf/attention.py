"""Attention for grouped-query models that never copies the KV cache, the same code on every device.

transformers' own paths repeat each key/value head once per query head in its group (``repeat_kv``) for every tree
or draft-row step: its SDPA path does so whenever a mask is given on CUDA (and for more than one query row on the
CPU), its eager path always. That copies the whole cache in every layer, every step, which one-row steps do not
pay: for an 8B model at a 4k context about 2 GB of memory traffic a step. Here the query heads of a group are
stacked along the row axis instead (the mask, shared by all heads, is stacked with them, once per step and layer
type), so attention reads the cache as it is: one SDPA call a layer, or, for attention logit soft-capping (Gemma
2), the same math written out on the stacked rows. One-row steps without a mask (plain decoding) are stacked too,
because torch's grouped (``enable_gqa``) CPU kernel is slower than the stacked call. Masks may be additive (the
tree mask, transformers' eager masks) or boolean (its SDPA masks); SDPA takes both, the written-out math too.

The grouped call implements only the keyword arguments below; any other argument with a value (attention
sinks, position bias, dropout in training, a window without a mask that applies it, ...) sends the call to the
model's own implementation unchanged, never dropped. Causal blocks without a mask (an SDPA prefill, which
transformers runs with ``enable_gqa``, no copy) and masks that differ per head take that path too.

Models on SDPA switch to ``NAME``; models on eager attention switch to ``EAGER_NAME`` only in the families whose
eager attention is the plain math (plus soft-capping) written out below, so nothing a family adds is lost.
"""

from __future__ import annotations

import sys

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask, sdpa_mask

NAME = "goose_grouped_sdpa"
EAGER_NAME = "goose_grouped_eager"

# Families whose eager attention is softmax(q kᵀ · scaling [soft-capped] + mask) v and nothing else (transformers
# 5.25), so the grouped math below computes what they do.
PLAIN_EAGER_FAMILIES = frozenset(
    "gemma gemma2 gemma3_text llama llama4_text mistral mixtral phi3 qwen2 qwen2_moe qwen3 qwen3_moe starcoder2"
    .split())

# bookkeeping arguments models pass along that do not change what attention computes
IGNORED = frozenset({"position_ids", "use_cache", "cache_position", "output_attentions", "cache"})


def _grouped_can_take(kwargs: dict, masked: bool) -> bool:
    for key, value in kwargs.items():
        if key in IGNORED or value is None or key == "softcap":
            continue
        if key == "sliding_window" and masked:
            continue  # the mask (goose's tree mask or transformers' windowed mask) applies the window
        return False
    return True


def _sdpa_fallback(module):
    return sdpa_attention_forward


def _eager_fallback(module):
    return sys.modules[type(module).__module__].eager_attention_forward


def _grouped(fallback):
    def grouped_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                          **kwargs):
        groups = getattr(module, "num_key_value_groups", 1)
        batch, heads, rows, dim = query.shape
        one_mask = attention_mask is not None and attention_mask.dim() == 4 and attention_mask.shape[1] == 1
        unmasked_row = attention_mask is None and rows == 1  # a plain decoding step: nothing to mask, nothing causal
        if (groups == 1 or dropout != 0.0 or not (one_mask or unmasked_row)
                or not (kwargs.keys() <= IGNORED or _grouped_can_take(kwargs, one_mask))):
            return fallback(module)(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                    is_causal=is_causal, **kwargs)
        # head h = g * groups + r reads KV head g; stack its query rows as r * rows + i
        stacked = query.reshape(batch, heads // groups, groups * rows, dim)
        mask = stacked_mask(attention_mask, groups) if one_mask else None
        softcap = kwargs.get("softcap")
        if softcap is None:
            out = torch.nn.functional.scaled_dot_product_attention(stacked, key, value, attn_mask=mask, scale=scaling)
        else:
            out = softcapped_attention(stacked, key, value, mask, dim**-0.5 if scaling is None else scaling, softcap)
        return out.reshape(batch, heads, rows, dim).transpose(1, 2).contiguous(), None

    return grouped_attention


def softcapped_attention(query, key, value, mask, scaling: float, softcap: float) -> torch.Tensor:
    """Eager attention with logit soft-capping (Gemma 2's), on rows that share their KV heads: the scores are capped
    before the mask is added and the softmax runs in float32, as transformers' eager path does."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min) if mask.dtype == torch.bool else scores + mask
    weights = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(weights, value)


grouped_sdpa = _grouped(_sdpa_fallback)
grouped_eager = _grouped(_eager_fallback)

_recent: list = []  # (mask, groups, its stacked copy) for the masks of the current step, newest last
_RECENT = 4  # a step hands out one mask per layer type


def stacked_mask(mask: torch.Tensor, groups: int) -> torch.Tensor:
    """The mask repeated once per query head of a group. Every layer of a type gets the same mask tensor in a
    step, so the copy is made once per step and layer type, not once per layer (a compiled step makes it inside
    its graph instead: the lookup is Python state a graph cannot hold)."""
    if torch.compiler.is_compiling():
        return mask.repeat(1, 1, groups, 1)
    for last, last_groups, out in _recent:
        if last is mask and last_groups == groups:
            return out
    out = mask.repeat(1, 1, groups, 1)
    _recent.append((mask, groups, out))
    del _recent[:-_RECENT]
    return out


AttentionInterface.register(NAME, grouped_sdpa)
AttentionInterface.register(EAGER_NAME, grouped_eager)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
ALL_MASK_ATTENTION_FUNCTIONS.register(EAGER_NAME, eager_mask)


def grouped_name_for(config) -> str | None:
    """The grouped implementation ``config``'s model should run, or None when it has no grouped KV heads or runs
    an attention the grouped math does not reproduce."""
    kv = getattr(config, "num_key_value_heads", None)
    if not kv or kv >= config.num_attention_heads:
        return None
    impl = getattr(config, "_attn_implementation", None)
    if impl == "sdpa":
        return NAME
    if impl == "eager" and getattr(config, "model_type", None) in PLAIN_EAGER_FAMILIES:
        return EAGER_NAME
    return None


def use_grouped_attention(net: torch.nn.Module) -> None:
    """Switch ``net`` to the grouped path when it has grouped KV heads, on any device."""
    name = grouped_name_for(net.config)
    if name is not None:
        net.set_attn_implementation(name)
