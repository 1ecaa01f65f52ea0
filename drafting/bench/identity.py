"""Is a run's output identical to `ar`'s, and if not, is its first divergence at a near-tie?"""

from __future__ import annotations

# A run differing from `ar` still counts as exact "up to ties" when its first divergence is at a position where
# `ar`'s top two logits were at most this far apart. In bf16 or int8 a tree pass rounds differently from a
# one-row pass (not a bug: the arithmetic differs), and such near-ties flip either way; fp32 needs no tolerance.
TIE_MARGIN = 0.5


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def tie_check(div: int | None, reference_margins: list[float] | None, tolerance: float) -> dict:
    """``exact_up_to_ties``: identical, or the first divergence is where `ar`'s top-2 logit margin was at most
    ``tolerance``; ``divergence_margin`` is that margin (None when identical or unknown)."""
    if div is None:
        return {"exact_up_to_ties": True, "divergence_margin": None, "tie_margin": tolerance}
    margin = reference_margins[div] if reference_margins is not None and div < len(reference_margins) else None
    return {"exact_up_to_ties": margin is not None and margin <= tolerance, "divergence_margin": margin,
            "tie_margin": tolerance}
