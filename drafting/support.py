"""What the Decoder accepts: allow-lists of attention implementations and cache layer kinds, and the attention
layout (which layers see a window, and how masks are handed to the model) that tree steps need.

A tree step replaces the model's own mask with one goose builds, and compacts the KV cache afterwards. That is
exact only where goose knows the rule each layer applies and can roll back what each layer stores, so anything
outside these lists is refused with one sentence instead of being decoded silently wrong.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from .attention import NAME as GROUPED

# Implementations that take a 4-D additive mask and apply it as given (flash-attention ignores it, flex wants a
# block mask, paged / remote kernels keep their own cache).
ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa", GROUPED)

# Cache layer kinds whose rule goose builds into the tree mask (None = plain causal, "window" = sliding window).
# Each is kept as a full buffered layer (drafting.kv_cache), so compaction is a gather along the sequence.
LAYER_RULES = {"full_attention": None, "sliding_attention": "window"}


class UnsupportedModelError(ValueError):
    """A speculator was asked to run on a model goose cannot verify trees on exactly; one sentence."""


@dataclass(frozen=True)
class AttentionLayout:
    """The per-layer-type rules of a model: ``windows[layer_type]`` is that type's window (None = full causal).

    ``per_type`` says the model takes a dict of masks keyed by layer type (it mixes full and windowed layers);
    otherwise every layer gets the one mask of the model's single layer type.
    """

    windows: dict
    per_type: bool

    @property
    def windowed(self) -> bool:
        return any(w is not None for w in self.windows.values())


FULL = AttentionLayout(windows={"full_attention": None}, per_type=False)


def _text_config(config):
    return config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config


def _layer_types(config) -> tuple[list[str], list[dict]]:
    from transformers.cache_utils import get_layer_types_and_kwargs

    return get_layer_types_and_kwargs(_text_config(config))


def _takes_mask_per_type(net) -> bool:
    """Whether the model's decoder forward accepts a dict of masks keyed by layer type (it then uses them as is)."""
    decoder = net.get_decoder() if hasattr(net, "get_decoder") else getattr(net, "model", net)
    try:
        source = inspect.getsource(type(decoder).forward)
    except (OSError, TypeError):
        return False
    return "isinstance(causal_mask_mapping := attention_mask, dict)" in source


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
    types, kwargs = _layer_types(config)
    windows: dict = {}
    for layer_type, kw in zip(types, kwargs):
        if layer_type not in LAYER_RULES:
            raise UnsupportedModelError(
                f"{name} has {layer_type!r} layers (a recurrent, hybrid or otherwise unsupported cache), whose state "
                f"a tree step cannot roll back; run it with the speculator 'ar' only."
            )
        window = kw.get("sliding_window") if LAYER_RULES[layer_type] == "window" else None
        if windows.setdefault(layer_type, window) != window:
            raise UnsupportedModelError(
                f"{name} gives its {layer_type!r} layers different windows, which goose cannot mask per layer; run "
                f"it with the speculator 'ar' only."
            )
    per_type = len(windows) > 1
    if per_type and not _takes_mask_per_type(net):
        raise UnsupportedModelError(
            f"{name} mixes full and windowed attention layers but does not take one mask per layer type, so a tree "
            f"mask cannot honour its windows; run it with the speculator 'ar' only."
        )
    if not any(w is not None for w in windows.values()) and not per_type:
        return FULL
    return AttentionLayout(windows=windows, per_type=per_type)
