"""Tiny randomly initialised Llamas, wrapped like loaded models, for fast mechanics tests."""

from __future__ import annotations

import torch


def tiny_llama(vocab: int, hidden: int, context: int, *, bos: int, eos_ids: set[int], name: str):
    """A 2-layer Llama (4 heads, 2 KV heads) in fp32; seeded, so every call builds the same weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from drafting.engine.hf.attention import use_grouped_attention
    from drafting.engine.loaded_model import LoadedModel
    from drafting.engine.hf import transformers_forward
    from drafting.machine.verify_cost import with_verify_cost

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        eos_token_id=vocab - 1,
        bos_token_id=bos,
    )
    model = LlamaForCausalLM(config).eval()
    use_grouped_attention(model)  # what load_model does, so mechanics tests cover the grouped tree attention
    return with_verify_cost(LoadedModel(
        make_forward=transformers_forward,
        model=model, tokenizer=None, name=name, device=torch.device("cpu"),
        dtype=torch.float32, eos_ids=eos_ids, max_context=context,
    ))
