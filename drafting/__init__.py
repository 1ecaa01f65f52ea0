"""goose's engine: training-free speculative decoding for transformers models.

The Python entry points load nothing until first used, so ``import drafting`` stays light:

- ``drafting.generate(prompt, ...)`` -> ``Generation`` (text, token ids, stop reason, stats)
- ``drafting.stream(prompt, ...)`` -> pieces of text as each step is accepted
- ``model.generate(**inputs, custom_generate=drafting.custom_generate, speculator="goose")``
- ``drafting.ChatSession`` -> a conversation whose KV cache is kept between turns

The layers inside, and the rule between them, are drawn in docs/architecture.md.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "generate": "api",
    "stream": "api",
    "Generation": "api",
    "Piece": "api",
    "Stream": "api",
    "forget_models": "api",
    "embedded_model_folder": "api",
    "custom_generate": "integrations.custom_generate",
    "ChatSession": "chat.session",
    "Detokenizer": "models.detokenize",
    "load_model": "models.loader",
    "ModelError": "errors",
    "ContextError": "errors",
    "UnsupportedModelError": "errors",
    "SpecError": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'drafting' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
