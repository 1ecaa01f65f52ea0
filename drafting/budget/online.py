"""A row budget chosen per step from measured tokens per step (Lookahead's and PTD's ``rows=auto``)."""

from __future__ import annotations

from typing import Iterable


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
