"""Models the GPU check builds without a download: randomly initialised Llamas of real models' shapes, made
directly on the target device in the target dtype, and a byte-level tokenizer so the bench can run on them."""

from __future__ import annotations

import torch

# Shapes from the published configs (config only: the weights are random).
SHAPES = {
    "llama3-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rope_theta=500000.0, rms_norm_eps=1e-5),
    "smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True),
    # what --cpu uses in place of all of them: the same code path at a size two shared cores run in seconds
    "tiny": dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, initializer_range=0.1),
    # the logit checks on CUDA: big enough for real kernels, small enough to run sequential passes per node
    "check": dict(vocab_size=2048, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048, initializer_range=0.1),
}


def byte_tokenizer():
    """A 257-entry byte-level tokenizer (256 bytes + ``<eos>``): real text in, real text out, no files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab["<eos>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")


# Every 2-D weight is multiplied by this after initialisation (as tests/engine/test_architectures.py does), so
# the identity checks run on a model with something to say: with the plain initialisation a 30-layer model of
# SmolLM2's shape repeats one or two tokens for ever. Larger weights also amplify rounding through the layers:
# measured in bfloat16 on CPU, a one-row pass and a full pass put the top-2 logits of the 4-layer `check` model
# at most 2 bf16 steps apart with weights x4, and of the 30-layer SmolLM2 shape at most 5 with x2 but 9 with x4
# (the identity checks' tie margin is 8 steps, gpu_checks.TIE_ULPS). Shapes not named keep the plain
# initialisation (the doctor's 8B model only times forwards).
PEAK = {"tiny": 4.0, "check": 4.0, "smollm2-135m": 2.0}


def random_llama(shape: str, device: torch.device, dtype: torch.dtype, seed: int = 0, tokenizer=None,
                 name: str | None = None):
    """A LoadedModel wrapping a seeded random Llama of ``shape``, initialised on ``device`` in ``dtype``
    (an 8B model is never materialised on the host), its 2-D weights times ``PEAK[shape]``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from drafting.engine.hf.attention import use_grouped_attention
    from drafting.engine.loaded_model import LoadedModel
    from drafting.engine.hf import transformers_forward
    from drafting.machine.verify_cost import with_verify_cost

    cfg = dict(SHAPES[shape])
    eos = 256 if tokenizer is not None else cfg["vocab_size"] - 1
    config = LlamaConfig(**cfg, eos_token_id=eos, bos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=dtype, attn_implementation="sdpa")
    model.eval()
    if shape in PEAK:
        with torch.no_grad():
            for p in model.parameters():  # a tied embedding is one parameter: scaled once
                if p.dim() == 2:
                    p.mul_(PEAK[shape])
    use_grouped_attention(model)  # what load_model does, so the check runs the attention path users get
    return with_verify_cost(LoadedModel(make_forward=transformers_forward, model=model, tokenizer=tokenizer, name=name or f"random {shape} ({str(dtype)[6:]})",
                       device=device, dtype=dtype, eos_ids={eos}, max_context=config.max_position_embeddings))


def parameter_count(lm) -> str:
    n = sum(p.numel() for p in lm.model.parameters())
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"
