"""What the Decoder accepts: allow-lists of model families, attention implementations and cache layer kinds, and the attention
layout (which layers see a window, and how masks are handed to the model) that tree steps need.

A tree step replaces the model's own mask with one goose builds, and compacts the KV cache afterwards. That is
exact only where goose knows the rule each layer applies, can roll back what each layer stores and the family
takes the positions and mask goose gives it (proven per family by a test), so anything outside these lists is
refused with one sentence instead of being decoded silently wrong.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

from drafting.engine.hf.attention import EAGER_NAME as GROUPED_EAGER, NAME as GROUPED
from drafting.errors import UnsupportedModelError

# Implementations that take a 4-D additive mask and apply it as given (flash-attention ignores it, flex wants a
# block mask, paged / remote kernels keep their own cache).
ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa", GROUPED, GROUPED_EAGER)

# Cache layer kinds whose rule goose builds into the tree mask (None = plain causal, "window" = a sliding window,
# "chunk" = attention within fixed chunks of positions). Each is kept as a full buffered layer
# (drafting.engine.hf.kv_cache), so compaction is a gather along the sequence.
LAYER_RULES = {"full_attention": None, "sliding_attention": "window", "chunked_attention": "chunk"}


# Families (the decoder's ``model_type``) on which tree steps are proven exact: tests/faults/test_architectures.py
# builds a tiny random model of each and checks every tree node's logits against the model's own sequential
# pass. A family not listed is refused, so a model goose never checked is never decoded silently differently;
# adding one is a name here and nothing else, since the test reads this set.
EXACT_FAMILIES = frozenset("""
    afmoe apertus apertus1p5_text arcee aria_text beam biogpt bitnet codegen cohere cohere2 cohere2_moe ctrl cwm
    diffllama doge dots1 ernie4_5 ernie4_5_moe exaone exaone4 exaone_moe falcon flex_olmo flint gemma gemma2
    gemma3_text glm glm4 glm4_moe gpt-sw3 gpt2 gpt_bigcode gpt_neox gpt_neox_japanese gpt_oss gptj granite
    granite_swa granitemoe granitemoe_swa granitemoeshared helium hrm_text hunyuan_v1_dense hunyuan_v1_moe hy_v3
    hyperclovax internlm3 iquestcoder jais2 jetmoe kolibri1 laguna llama llama4_text mellum mimo_v2_flash
    minimax_m2 minimax_m3_vl_text ministral ministral3 mistral mixtral modernbert-decoder moshi nanochat nemotron
    olmo olmo2 olmo3 olmoe opt persimmon phi phi3 phimoe qwen2 qwen2_moe qwen3 qwen3_moe sarvam_moe seed_oss
    smollm3 solar_open stablelm starcoder2 vaultgemma whisper xglm
""".split())

ALIBI = ("adds ALiBi biases built from a plain padding mask and each key's index, which a tree mask and a tree's "
         "repeated positions do not fit")
COUNTED_POSITIONS = ("counts positions from how many rows come after the cache instead of taking position ids, so "
                     "tree rows would get positions by their order rather than their depth")
ENCODER = ("is an encoder family whose positions (offset past the padding index) and bidirectional attention goose "
           "does not set for a tree")

# Families refused for a reason worth naming; the rest of those not proven exact get a plain sentence.
REFUSED_FAMILIES = {
    **dict.fromkeys(("bloom", "mpt"), ALIBI),
    **dict.fromkeys(("bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart", "mvp",
                     "pegasus", "plbart", "prophetnet", "trocr", "xlnet", "openai-gpt", "cpmant"),
                    COUNTED_POSITIONS),
    **dict.fromkeys(("bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie",
                     "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer",
                     "xlm", "xlm-roberta", "xlm-roberta-xl", "xmod"), ENCODER),
}

# Config switches that turn on ALiBi in a family otherwise proven exact (Falcon's first models).
ALIBI_SWITCHES = ("alibi",)

# Config switches under which a model computes something from a row's index in the step instead of its position
# (transformers' Llama 4 derives its attention temperature from ``arange(rows) + cached``), so tree rows, whose
# positions repeat, would get another row's value.
ROW_ORDER_SWITCHES = ("attn_temperature_tuning",)


@dataclass(frozen=True)
class AttentionLayout:
    """The per-layer-type rules of a model: ``rules[layer_type]`` is None (full causal) or ``("window", size)`` or
    ``("chunk", size)``.

    ``per_type`` says the model takes a dict of masks keyed by layer type (it mixes full and windowed layers);
    otherwise every layer gets the one mask of the model's single layer type.
    """

    rules: dict
    per_type: bool

    @property
    def windowed(self) -> bool:
        return any(rule is not None for rule in self.rules.values())


FULL = AttentionLayout(rules={"full_attention": None}, per_type=False)


def _text_config(config):
    return config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config


def _layer_types(config) -> tuple[list[str], list[dict]]:
    from transformers.cache_utils import get_layer_types_and_kwargs

    return get_layer_types_and_kwargs(_text_config(config))


def _takes_mask_per_type(net) -> bool:
    """Whether the model's decoder forward accepts a dict of masks keyed by layer type (it then uses them as is)."""
    return _source_takes_mask_per_type(tuple({type(module): None for module in net.modules()}))


@functools.lru_cache(maxsize=None)
def _source_takes_mask_per_type(kinds: tuple) -> bool:
    for kind in kinds:
        try:
            source = inspect.getsource(kind.forward)
        except (OSError, TypeError):
            continue
        if "isinstance(causal_mask_mapping := attention_mask, dict)" in source:
            return True
    return False


def _check_family(text_config, name: str) -> None:
    family = getattr(text_config, "model_type", "") or "custom"
    if family not in EXACT_FAMILIES:
        reason = REFUSED_FAMILIES.get(family, "belongs to a family on which goose has not proven tree steps exact")
        raise UnsupportedModelError(f"{name} ({family}) {reason}; run it with the speculator 'ar' only.")
    for switch in ALIBI_SWITCHES:
        if getattr(text_config, switch, False) is True:
            raise UnsupportedModelError(f"{name} ({family} with {switch}=True) {ALIBI}; run it with the speculator "
                                        f"'ar' only.")


def attention_layout(net, name: str = "the model") -> AttentionLayout:
    """The layout of ``net``, or UnsupportedModelError (one sentence) when goose cannot verify trees on it exactly."""
    config = net.config
    impl = getattr(config, "_attn_implementation", None) or "eager"
    text_impl = getattr(_text_config(config), "_attn_implementation", None) or impl
    for found in {impl, text_impl}:
        if found not in ATTENTION_IMPLEMENTATIONS:
            raise UnsupportedModelError(
                f"{name} runs attention implementation {found!r}, which cannot take a tree mask; load it with "
                f'attn_implementation="sdpa" (or "eager").'
            )
    text = _text_config(config)
    for switch in ROW_ORDER_SWITCHES:
        if getattr(text, switch, False):
            raise UnsupportedModelError(
                f"{name} computes part of its attention from the order of rows rather than their positions "
                f"({switch}), which a tree breaks; set {switch}=False in its config or run it with the speculator "
                f"'ar' only."
            )
    try:
        types, kwargs = _layer_types(config)
    except Exception:  # a config transformers cannot read layer by layer: its family decides the sentence
        _check_family(text, name)
        raise

    rules: dict = {}
    for layer_type, kw in zip(types, kwargs):
        if layer_type not in LAYER_RULES:
            raise UnsupportedModelError(
                f"{name} has {layer_type!r} layers (a recurrent, hybrid or otherwise unsupported cache), whose state "
                f"a tree step cannot roll back; run it with the speculator 'ar' only."
            )
        kind = LAYER_RULES[layer_type]
        rule = None if kind is None else (kind, int(kw["sliding_window"]))  # transformers' name for both sizes
        if rules.setdefault(layer_type, rule) != rule:
            raise UnsupportedModelError(
                f"{name} gives its {layer_type!r} layers different windows, which goose cannot mask per layer; run "
                f"it with the speculator 'ar' only."
            )
    _check_family(text, name)  # after the layer kinds: a recurrent or hybrid cache is the reason worth naming
    per_type = len(rules) > 1
    if per_type and not _takes_mask_per_type(net):
        raise UnsupportedModelError(
            f"{name} mixes full and windowed attention layers but does not take one mask per layer type, so a tree "
            f"mask cannot honour its windows; run it with the speculator 'ar' only."
        )
    layout = AttentionLayout(rules=rules, per_type=per_type)
    return layout if layout.windowed or per_type else FULL
