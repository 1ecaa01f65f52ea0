"""Tiny random models of any transformers causal-LM family, built from its config class with no download.

Each family's config is made with its own defaults shrunk to a few dozen dimensions (the names below are the
ones configs use, or map to through ``attribute_map``); ``OVERRIDES`` fixes the families whose defaults the
generic shrink leaves inconsistent. Weights are seeded and scaled up, and parameters a family initialises to
zero (learned position tables, some gates) are filled with noise, so a wrong position or mask shows in the
logits instead of hiding behind a zero.
"""

from __future__ import annotations

import re
import warnings

import torch
import transformers as T
from transformers import CONFIG_MAPPING

VOCAB = 512
SHRINK = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=512, moe_intermediate_size=32,
              num_experts=2, num_local_experts=2, n_routed_experts=2, num_experts_per_tok=1, n_shared_experts=1,
              shared_expert_intermediate_size=32, ffn_dim=128, n_inner=128, decoder_layers=2,
              decoder_ffn_dim=128, decoder_attention_heads=4, d_model=64, num_layers=2, bos_token_id=1,
              eos_token_id=VOCAB - 1, pad_token_id=0, decoder_start_token_id=1, topk_group=1, n_group=1,
              first_k_dense_replace=1)

# families whose defaults do not shrink consistently on their own
OVERRIDES = {
    "gptj": dict(rotary_dim=8),
    "codegen": dict(rotary_dim=8),
    "falcon": dict(alibi=False),
}

MAX_PARAMETERS = 20_000_000  # a family whose defaults do not shrink (vision towers, audio codecs) is skipped


class NotTiny(Exception):
    """The family's config could not be made tiny by the generic shrink."""


def tiny_config(model_type: str, **extra):
    cls = CONFIG_MAPPING[model_type]
    base = cls()
    kw = {k: v for k, v in SHRINK.items() if hasattr(base, k) or k in getattr(cls, "attribute_map", {})}
    kw.update(OVERRIDES.get(model_type, {}), **extra)
    while True:
        try:
            return cls(**kw)
        except AttributeError as exc:  # a derived attribute without a setter (FalconConfig.head_dim)
            found = re.search(r"property '(\w+)'", str(exc))
            if not found or found.group(1) not in kw:
                raise
            kw.pop(found.group(1))


def tiny_family_model(model_type: str, impl: str = "sdpa", **extra) -> torch.nn.Module:
    """A seeded random fp32 model of ``model_type`` (``impl`` attention, eager where the family has no SDPA)."""
    config = tiny_config(model_type, **extra)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        size = sum(p.numel() for p in T.AutoModelForCausalLM.from_config(config).parameters())
    if size > MAX_PARAMETERS:
        raise NotTiny(f"{model_type} keeps {size} parameters after shrinking")
    torch.manual_seed(0)
    try:
        net = T.AutoModelForCausalLM.from_config(config, attn_implementation=impl)
    except ValueError:
        net = T.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    net.eval()
    with torch.no_grad():
        for p in net.parameters():
            if p.dim() >= 2:
                if p.std() == 0:
                    p.normal_(0.0, 0.5)
                else:
                    p.mul_(3.0)  # peaked logits, so greedy decoding has no near-ties
    return net
