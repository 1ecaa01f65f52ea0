"""How many verification rows pay on this hardware.

A step with n rows costs ``curve.time(n)`` seconds and yields some expected number of tokens; the rule (the
Sequoia one, REFERENCE §7) is to pick the size with the most tokens per second. A plain step (one row) yields
exactly one token, so a size pays only where its tokens per step beat ``curve.relative(n)``.

``best_size`` applies the rule to a model of expected tokens (for drafters that can predict their acceptance);
``OnlineBudget`` learns tokens per step for a few candidate sizes from the steps actually run (for drafters
that cannot, such as in-model drafting), and falls back to plain steps when no size pays.
"""

from __future__ import annotations

from typing import Callable, Iterable

from .cost import CostCurve


def best_size(curve: CostCurve, expected_tokens: Callable[[int], float], sizes: Iterable[int]) -> int:
    """The size with the most expected tokens per second (ties go to the smaller size)."""
    best, best_rate = 1, 1.0 / curve.time(1)
    for n in sorted(set(sizes)):
        rate = expected_tokens(n) / curve.time(n)
        if rate > best_rate * (1 + 1e-9):
            best, best_rate = n, rate
    return best


class OnlineBudget:
    """Picks a row count per step among ``sizes`` from measured tokens per step.

    Each size keeps an EMA of the tokens its steps produced. The size with the best EMA per second is used;
    every other size is probed again after a number of steps that grows with its cost relative to the best, so
    a cheap probe that nearly pays comes back often and an expensive or hopeless one rarely. Size 1 (plain steps) is always a candidate and
    is known exactly: one token per step.
    """

    def __init__(self, curve: CostCurve, sizes: Iterable[int], alpha: float = 0.3, probe_every: int = 16):
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
