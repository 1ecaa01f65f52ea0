"""The llama.cpp engine: a GGUF model run by llama.cpp's own kernels, drafts verified through sequence ids.

``llama_forward`` is what a llama.cpp ``LoadedModel`` carries as its ``make_forward``; its ``model`` is a
``LlamaNet``."""

from __future__ import annotations

from drafting.engine.llama.forward import LlamaForward


def llama_forward(lm, static_shapes=None):
    """``lm``'s forward; llama.cpp sizes its own passes, so there are no static shapes to choose."""
    if static_shapes:
        raise ValueError("Static step shapes are an option of the transformers engine; llama.cpp sizes its own passes.")
    return LlamaForward(lm.model)
