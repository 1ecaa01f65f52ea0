"""How many draft nodes pay on this hardware (the Sequoia-style rule: size a tree by expected tokens per second).

A step that verifies n draft nodes (n + 1 rows with the root) costs ``overhead + curve.time(n + 1)`` seconds
and is expected to emit ``1 + sum of the nodes' path probabilities`` tokens (a node's path probability is the
chance that it and all its ancestors are accepted). Given candidate nodes in the order they would be added
(best-first, parents before children), ``best_prefix`` picks the count that maximises tokens per second.
Because the measured curve is used, the same rule picks small trees on a CPU and large ones on a GPU.

The probabilities come from drafting.budget.acceptance_rates; drafters that cannot predict their acceptance
(in-model drafting) size their steps with drafting.budget.online instead.
"""

from __future__ import annotations

import heapq
from typing import Sequence


def best_prefix(path_probs: Sequence[float], curve, overhead_s: float = 0.0, max_nodes: int | None = None,
                riders: int = 0) -> int:
    """Number of leading candidates (0 = a plain one-row step) that maximises expected tokens per second.

    ``curve`` needs ``time(rows) -> seconds`` (``drafting.machine.cost_curve.CostCurve``); ``riders`` rows that earn nothing
    this step (PTD's draft rows) ride along whenever at least one candidate is drafted."""
    n_max = len(path_probs) if max_nodes is None else min(len(path_probs), max_nodes)
    best_n, best_rate = 0, 1.0 / (overhead_s + curve.time(1))
    gain = 1.0
    for n in range(1, n_max + 1):
        gain += path_probs[n - 1]
        rate = gain / (overhead_s + curve.time(n + 1 + riders))
        if rate > best_rate:
            best_n, best_rate = n, rate
    return best_n


def most_paying_nodes(best: float, curve, max_nodes: int, overhead_s: float = 0.0) -> int:
    """At most how many nodes a paying draft can have when each node's path probability is ``best`` or less (0:
    no such draft pays, up to ``max_nodes``). ``n`` nodes then emit at most ``1 + n·best`` tokens, which beats a
    plain step only if ``best > (time(n + 1) - time(1)) / (n · (overhead + time(1)))``. Between two of the curve's
    sizes that bound is monotone in ``n``, so it is read at the sizes alone, and the answer runs to the end of the
    last stretch that pays somewhere."""
    one = overhead_s + curve.time(1)
    rows = [r for r in curve.sizes if 1 < r <= max_nodes] + [max_nodes + 1]
    pays = [i for i, r in enumerate(rows) if (curve.time(r) - curve.time(1)) / ((r - 1) * one) < best]
    if not pays:
        return 0
    return rows[min(pays[-1] + 1, len(rows) - 1)] - 1


def chain_pays(rate: float, curve, max_depth: int, overhead_s: float = 0.0) -> bool:
    """Whether a chain of up to ``max_depth`` nodes, each accepted with probability ``rate`` given its parent
    (path probabilities ``rate^1 .. rate^n``), beats a plain step. It bounds what siblings can earn too, where at
    most one of them is accepted and the best has ``rate``."""
    return best_prefix([rate ** d for d in range(1, max_depth + 1)], curve, overhead_s) > 0


def paying_nodes(parents: Sequence[int], accept: Sequence[float], curve, overhead_s: float = 0.0, riders: int = 0,
                 ranked: bool = True) -> list[int]:
    """The nodes (ascending, root excluded) of the candidate tree worth verifying: ``accept[i]`` is node i's
    acceptance probability given its parent, multiplied down into path probabilities; nodes are taken best-first
    (``ranked``) or in index order, and the prefix that maximises expected tokens per second is kept."""
    probs = [1.0] * len(parents)
    for i in range(1, len(parents)):
        probs[i] = probs[parents[i]] * accept[i]
    order = best_first(parents, probs) if ranked else list(range(1, len(parents)))
    n = best_prefix([probs[i] for i in order], curve, overhead_s, riders=riders)
    return sorted(order[:n])


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


