"""The reference a llama.cpp tree pass must match: the same tokens fed one at a time."""

from __future__ import annotations

from drafting.engine.tree import Draft, DraftTree


def sequential(lm, cache, prefix: int, tokens: list[int]):
    """The logits after each of ``tokens`` fed one at a time after ``prefix`` cached tokens (the reference a tree
    pass must match); the cache is cropped back to ``prefix`` afterwards."""
    fwd = lm.make_forward(lm, None)
    rows = []
    for k, token in enumerate(tokens):
        rows.append(fwd.step(Draft(tree=DraftTree(token)), cache)[0].clone())
        fwd.keep(cache, prefix + k, [0])
    fwd.crop(cache, prefix)
    return rows
