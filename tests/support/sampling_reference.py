"""Independent reference implementations the sampling tests check the production code against."""

from __future__ import annotations

import math

import torch


def reference_warp(logits: list[float], temperature: float, top_k: int = 0, top_p: float = 1.0) -> list[float]:
    """Plain-Python warping (float64): temperature, then top-k, then top-p on the renormalised top-k."""
    z = [v / temperature for v in logits]
    top = max(z)
    probs = [math.exp(v - top) for v in z]
    order = sorted(range(len(z)), key=lambda i: -z[i])
    keep = order[:top_k] if top_k else order
    mass = sum(probs[i] for i in keep)
    kept, before = [], 0.0
    for i in keep:
        if before >= top_p:
            break
        kept.append(i)
        before += probs[i] / mass
    total = sum(probs[i] for i in kept)
    return [probs[i] / total if i in kept else 0.0 for i in range(len(z))]


def chi_square(counts: dict, probs: dict, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Pearson's chi-square of observed ``counts`` against exact ``probs`` (outcome -> probability).

    Cells expected fewer than ``min_expected`` times are pooled into one cell (merged into the smallest other
    cell if the pool itself is too small). Returns (statistic, degrees of freedom, p-value).
    """
    n = sum(counts.values())
    assert set(counts) <= {k for k, v in probs.items() if v > 0}, "an outcome of probability 0 was sampled"
    cells, pool_obs, pool_exp = [], 0.0, 0.0
    for key, p in probs.items():
        exp, obs = n * p, counts.get(key, 0)
        if exp >= min_expected:
            cells.append([obs, exp])
        else:
            pool_obs += obs
            pool_exp += exp
    if pool_exp > 0:
        if pool_exp >= min_expected or not cells:
            cells.append([pool_obs, pool_exp])
        else:
            smallest = min(cells, key=lambda c: c[1])
            smallest[0] += pool_obs
            smallest[1] += pool_exp
    stat = sum((o - e) ** 2 / e for o, e in cells)
    df = len(cells) - 1
    if df < 1:
        return stat, df, 1.0
    p_value = torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64))
    return stat, df, float(p_value)
