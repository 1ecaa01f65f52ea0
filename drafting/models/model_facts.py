"""What goose reads off a transformers model: its end-of-sequence ids, its context length, its attention window."""

from __future__ import annotations

from transformers.cache_utils import get_layer_types_and_kwargs


def eos_ids_of(net, tokenizer) -> set[int]:
    """Every end-of-sequence id the generation config, the model config or the tokenizer names."""
    ids: set[int] = set()
    for src in (getattr(net, "generation_config", None), net.config):
        eos = getattr(src, "eos_token_id", None) if src is not None else None
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, (list, tuple)):
            ids.update(int(e) for e in eos)
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def max_context_of(config) -> int:
    return int(getattr(config, "max_position_embeddings", 2048) or 2048)


def sliding_window_of(config) -> int | None:
    """The narrowest attention window (or chunk) of any layer, None when every layer attends to the whole
    context; read as transformers reads it to build the cache. Tree masks honour it (drafting.engine.hf.model_support)."""
    cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    try:
        _, kwargs = get_layer_types_and_kwargs(cfg)
    except Exception:  # a remote-code config transformers cannot read this way: nothing to report
        return None
    windows = [kw["sliding_window"] for kw in kwargs if kw.get("sliding_window")]
    return int(min(windows)) if windows else None
