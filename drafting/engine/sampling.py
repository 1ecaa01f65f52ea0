"""The warped target distribution that sampling settings (``sampling_params``) define, shared by plain
sampling and tree verification (the acceptance rules that use them are in ``acceptance``).

Temperature 0 is greedy decoding; above 0 tokens are drawn from ``warp``'s distribution: temperature, then
top-k, then top-p.
"""

from __future__ import annotations

import torch

from drafting.engine.sampling_params import SamplingParams


def warp(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The warped target distribution of one row (or a batch of rows): temperature, then top-k, then top-p.

    Top-p keeps the smallest set of most likely tokens whose probability reaches ``top_p`` (the most likely token
    always stays). Computed in float32 whatever the model's dtype. The same function serves plain sampling and
    tree verification, so both sample from the same distribution.
    """
    x = logits.float()
    if params.temperature != 1.0:
        x = x / params.temperature
    vocab = x.shape[-1]
    k = params.top_k if 0 < params.top_k < vocab else 0
    if k == 0 and params.top_p >= 1.0:
        return torch.softmax(x, dim=-1)
    if k == 0 and x.dim() == 1 and x.device.type == "cpu":
        probs = torch.softmax(x, dim=-1)
        for probe in _NUCLEUS_PROBES:
            if probe >= vocab:
                break
            fast = _nucleus_from_top(probs, params.top_p, probe)
            if fast is not None:
                return fast
    if k:
        vals, idx = x.topk(k, dim=-1)  # sorted, most likely first
    else:
        vals, idx = x.sort(dim=-1, descending=True)
    if params.top_p < 1.0:
        probs = torch.softmax(vals, dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass of the more likely tokens
        vals = vals.masked_fill(before >= params.top_p, float("-inf"))
    kept = torch.full_like(x, float("-inf")).scatter(-1, idx, vals)
    return torch.softmax(kept, dim=-1)


# Candidates looked at before sorting the whole vocabulary for top-p: a top-k of a few hundred costs a small
# fraction of a full sort of a large vocabulary; only a nucleus reaching beyond them pays for the sort
# (docs/measurements.md).
_NUCLEUS_PROBES = (256, 1024)


def _nucleus_from_top(probs: torch.Tensor, top_p: float, probe: int) -> torch.Tensor | None:
    """Top-p of one row of probabilities from its ``probe`` most likely tokens, the same set a full sort keeps;
    None when those tokens carry less than ``top_p`` (the nucleus reaches further)."""
    vals, idx = probs.topk(probe)
    cum = vals.cumsum(0)
    if float(cum[-1]) < top_p:
        return None
    vals = vals.masked_fill(cum - vals >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(0, idx, vals)
    return kept / kept.sum()


def sample(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One token drawn from unnormalised ``weights`` (V,) by inverting the CDF at ``uniform`` (shape (1,)).

    Much cheaper than torch.multinomial over a large vocabulary; a token of weight 0 is never drawn.
    """
    cdf = weights.cumsum(0)
    total = cdf[-1:]
    v = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, v, right=True)
