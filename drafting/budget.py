"""How many draft nodes pay on this hardware (REFERENCE §7).

A step that verifies n draft nodes (n + 1 rows with the root) costs ``overhead + curve.time(n + 1)`` seconds
and is expected to emit ``1 + sum of the nodes' path probabilities`` tokens (a node's path probability is the
chance that it and all its ancestors are accepted). Given candidate nodes in the order they would be added
(best-first, parents before children), ``best_prefix`` picks the count that maximises tokens per second.
Because the measured curve is used, the same rule picks small trees on a CPU and large ones on a GPU.

``AcceptanceStats`` keeps the online estimates the probabilities come from: a Beta posterior per key (the
speculator decides what a key is: source, depth, score bucket, ...).
"""

from __future__ import annotations

import heapq
from typing import Sequence


def best_prefix(path_probs: Sequence[float], curve, overhead_s: float = 0.0, max_nodes: int | None = None) -> int:
    """Number of leading candidates (0 = a plain one-row step) that maximises expected tokens per second.

    ``curve`` needs ``time(rows) -> seconds`` (``drafting.cost.CostCurve``)."""
    n_max = len(path_probs) if max_nodes is None else min(len(path_probs), max_nodes)
    best_n, best_rate = 0, 1.0 / (overhead_s + curve.time(1))
    gain = 1.0
    for n in range(1, n_max + 1):
        gain += path_probs[n - 1]
        rate = gain / (overhead_s + curve.time(n + 1))
        if rate > best_rate:
            best_n, best_rate = n, rate
    return best_n


def best_first(parents: Sequence[int], probs: Sequence[float]) -> list[int]:
    """Node order (root excluded) by falling path probability; a node never precedes its parent.

    ``probs[i]`` is node i's path probability; node 0 is the root, ``parents[i] < i``."""
    kids: list[list[int]] = [[] for _ in parents]
    for i in range(1, len(parents)):
        kids[parents[i]].append(i)
    order: list[int] = []
    heap = [(-probs[c], c) for c in kids[0]]
    heapq.heapify(heap)
    while heap:
        _, node = heapq.heappop(heap)
        order.append(node)
        for c in kids[node]:
            heapq.heappush(heap, (-probs[c], c))
    return order


class AcceptanceStats:
    """Online acceptance probability per key: a Beta(prior_mean * strength, ...) posterior."""

    def __init__(self, strength: float = 4.0):
        self.strength = strength
        self._counts: dict[object, list[float]] = {}  # key -> [accepted, tested]

    def estimate(self, key, prior: float) -> float:
        acc, tested = self._counts.get(key, (0.0, 0.0))
        return (acc + prior * self.strength) / (tested + self.strength)

    def update(self, key, accepted: bool) -> None:
        c = self._counts.get(key)
        if c is None:
            c = self._counts[key] = [0.0, 0.0]
        c[0] += accepted
        c[1] += 1.0

    def table(self) -> dict:
        """Measured rates per key (for stats and reports)."""
        return {str(k): (round(a / t, 3), int(t)) for k, (a, t) in self._counts.items() if t}


def is_sane(curve, slack: float = 1.3) -> bool:
    """A verify cost curve measured on a busy machine can hold spikes; more rows never cost less."""
    t, n = curve.seconds, curve.sizes
    rising = all(t[i] <= slack * min(t[i + 1 :]) for i in range(len(t) - 1))
    # nor do they cost more than in proportion to the rows (the last point has no later one to check it)
    return rising and all(t[i + 1] <= slack * t[i] * n[i + 1] / n[i] for i in range(len(t) - 1))


def monotone(curve):
    """The curve with each point lowered to the cheapest larger size and capped at proportional growth
    (removes upward spikes)."""
    from .cost import CostCurve

    t, n = list(curve.seconds), curve.sizes
    for i in range(1, len(t)):
        t[i] = min(t[i], t[i - 1] * n[i] / n[i - 1])
    for i in range(len(t) - 2, -1, -1):
        t[i] = min(t[i], t[i + 1])
    return CostCurve(sizes=list(curve.sizes), seconds=t)
