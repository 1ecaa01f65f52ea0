"""The transformers engine: a torch model verifies drafts through a 4-D tree mask over goose's own KV cache.

``transformers_forward`` is what a transformers ``LoadedModel`` carries as its ``make_forward``."""

from __future__ import annotations

from drafting.engine.hf.forward import HFForward
from drafting.engine.hf.static_shapes import StaticForward


def transformers_forward(lm, static_shapes=None):
    """``lm``'s forward: fixed step shapes when ``static_shapes`` (a StaticShapes) asks for them, else dynamic."""
    if static_shapes:
        return StaticForward.shared(lm, static_shapes)
    return HFForward(lm.model, lm.dtype, lm.device, lm.max_context, lm.name)
