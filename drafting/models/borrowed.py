"""A transformers model object the caller already holds, used by goose without being changed behind their back.

goose's own loader packs weights and switches attention for speed; on a caller's model nothing is repacked,
and the one switch made (grouped-query tree attention, see drafting.engine.hf.attention) lasts only while goose runs:
``borrowed`` puts the model's own attention implementation back afterwards, also on an error or Ctrl-C.
The KV cache is goose's own, never attached to the model.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from drafting.engine.hf.attention import use_grouped_attention
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.hf import transformers_forward
from drafting.machine.verify_cost import with_verify_cost
from drafting.models.model_facts import eos_ids_of, max_context_of, sliding_window_of


def is_model_object(model) -> bool:
    return isinstance(model, torch.nn.Module)


def wrap_model(net: torch.nn.Module, tokenizer=None, eos_ids: set[int] | None = None) -> LoadedModel:
    """Describe ``net`` as a LoadedModel (device, dtype, EOS ids, context) without touching it."""
    config = getattr(net, "config", None)
    if config is None or not hasattr(net, "get_output_embeddings") or net.get_output_embeddings() is None:
        raise ValueError(f"{type(net).__name__} is not a transformers causal language model with an output head.")
    embed = net.get_input_embeddings().weight
    name = getattr(config, "_name_or_path", "") or type(net).__name__
    return with_verify_cost(LoadedModel(
        make_forward=transformers_forward,
        model=net,
        tokenizer=tokenizer,
        name=f"{name} (caller's model)",  # its own cost-curve cache entry: goose did not pack its weights
        device=embed.device,
        dtype=embed.dtype,
        eos_ids=eos_ids_of(net, tokenizer) if eos_ids is None else set(eos_ids),
        max_context=max_context_of(config),
        sliding_window=sliding_window_of(config),
        weights="float",
    ))


@contextmanager
def borrowed(net: torch.nn.Module):
    """Run goose's grouped tree attention on ``net`` for the duration of the block, then restore its own."""
    config = net.config
    before = getattr(config, "_attn_implementation", None)
    use_grouped_attention(net)
    changed = getattr(config, "_attn_implementation", None) != before
    try:
        yield net
    finally:
        if changed:
            net.set_attn_implementation(before)
