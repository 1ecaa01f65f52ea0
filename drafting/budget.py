"""How many draft nodes pay on this hardware (REFERENCE §7).

A step that verifies n draft nodes (n + 1 rows with the root) costs ``overhead + curve.time(n + 1)`` seconds
and is expected to emit ``1 + sum of the nodes' path probabilities`` tokens (a node's path probability is the
chance that it and all its ancestors are accepted). Given candidate nodes in the order they would be added
(best-first, parents before children), ``best_prefix`` picks the count that maximises tokens per second.
Because the measured curve is used, the same rule picks small trees on a CPU and large ones on a GPU.

``AcceptanceStats`` keeps the online estimates the probabilities come from: a Beta posterior per key (the
speculator decides what a key is: source, depth, score bucket, ...).

For drafters that cannot predict their acceptance (in-model drafting: Lookahead, PTD), ``OnlineBudget`` learns
tokens per step for a few candidate row counts from the steps actually run and falls back to plain steps when
no size pays.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Sequence


def best_prefix(path_probs: Sequence[float], curve, overhead_s: float = 0.0, max_nodes: int | None = None,
                riders: int = 0) -> int:
    """Number of leading candidates (0 = a plain one-row step) that maximises expected tokens per second.

    ``curve`` needs ``time(rows) -> seconds`` (``drafting.cost.CostCurve``); ``riders`` rows that earn nothing
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

    def learn(self, keys: Sequence, parents: Sequence[int], accepted: Sequence[int]) -> None:
        """A verified tree: each node whose parent was accepted was tested against the target; count it under
        its key (``keys[i]`` for node i, root excluded)."""
        on_path = set(accepted)
        for i in range(1, len(parents)):
            if parents[i] in on_path:
                self.update(keys[i], i in on_path)

    def table(self) -> dict:
        """Measured rates per key (for stats and reports)."""
        return {str(k): (round(a / t, 3), int(t)) for k, (a, t) in self._counts.items() if t}


def is_sane(curve, slack: float = 1.3, noise_s: float = 0.002) -> bool:
    """A verify cost curve measured on a busy machine can hold spikes; more rows never cost less (beyond
    ``slack`` and timer noise)."""
    t, n = curve.seconds, curve.sizes
    rising = all(t[i] <= slack * min(t[i + 1 :]) + noise_s for i in range(len(t) - 1))
    # nor do they cost more than in proportion to the rows (the last point has no later one to check it)
    return rising and all(t[i + 1] <= slack * t[i] * n[i + 1] / n[i] + noise_s for i in range(len(t) - 1))


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


def sane_curve(lm):
    """The model's cached verify cost curves (``drafting.cost.PrefixCost``), measured again if they look
    taken on a busy machine, then made monotone; one object per model, shared by every speculator with an
    ``auto`` budget and kept true to the run's own steps by drafting.curve_watch."""
    from .cost import PrefixCost, prefix_cost
    from .curve_watch import watch, watch_of

    have = watch_of(lm.model)
    if have is not None:
        return have.cost

    def build(refresh: bool = False) -> PrefixCost:
        cost = prefix_cost(lm, refresh=refresh)
        if not all(is_sane(c) for c in (cost.short, cost.long) if c is not None):
            cost = prefix_cost(lm, refresh=True)
        long = monotone(cost.long) if cost.long is not None else None
        return PrefixCost(monotone(cost.short), long, cost.short_prefix, cost.long_prefix)

    result = build()
    watch(lm.model, result, lambda: build(refresh=True))
    return result


class OnlineBudget:
    """Picks a row count per step among ``sizes`` from measured tokens per step.

    Each size keeps an EMA of the tokens its steps produced. The size with the best EMA per second is used;
    every other size is probed again after a number of steps that grows with its cost relative to the best, so
    a cheap probe that nearly pays comes back often and an expensive or hopeless one rarely. Size 1 (plain steps) is always a candidate and
    is known exactly: one token per step.
    """

    def __init__(self, curve, sizes: Iterable[int], alpha: float = 0.3, probe_every: int = 16):
        self.curve = curve
        self.sizes = sorted({int(n) for n in sizes if n >= 2})
        self.alpha = alpha
        self.probe_every = probe_every
        self.ema: dict[int, float] = {}
        self.last_tried: dict[int, int] = {}
        self.clock = 0

    def rate(self, n: int) -> float:
        """Measured tokens per second of size n (None where never tried)."""
        if n == 1:
            return 1.0 / self.curve.time(1)
        if n not in self.ema:
            return None
        return self.ema[n] / self.curve.time(n)

    def best(self) -> int:
        rates = {n: self.rate(n) for n in [1, *self.sizes]}
        return max((n for n in rates if rates[n] is not None), key=lambda n: (rates[n], -n))

    def choose(self) -> int:
        """The size for the next step: an untried size first (smallest first), else a probe that is due,
        else the best."""
        self.clock += 1
        for n in self.sizes:
            if n not in self.ema:
                return n
        best = self.best()
        best_rate = self.rate(best)
        due = [
            n
            for n in self.sizes
            if n != best
            and self.clock - self.last_tried.get(n, 0)
            >= self.probe_every * self.curve.relative(n) * best_rate / self.rate(n)
        ]
        return min(due, key=lambda n: self.last_tried.get(n, 0)) if due else best

    def update(self, n: int, tokens: int) -> None:
        """A step of size n produced ``tokens`` tokens."""
        if n < 2:
            return
        self.last_tried[n] = self.clock
        old = self.ema.get(n)
        self.ema[n] = float(tokens) if old is None else old + self.alpha * (tokens - old)

    def state(self) -> dict:
        return {f"ema_{n}": round(v, 3) for n, v in sorted(self.ema.items())}
