"""Measured acceptance rates per draft-node kind, the estimates the budget rule prices trees with."""

from __future__ import annotations

from typing import Sequence


class AcceptanceStats:
    """Online acceptance probability per key: a Beta(prior_mean * strength, ...) posterior."""

    def __init__(self, strength: float = 4.0):
        self.strength = strength
        self._counts: dict[object, list[float]] = {}  # key -> [accepted, tested]

    def estimate(self, key, prior: float) -> float:
        acc, tested = self._counts.get(key, (0.0, 0.0))
        return (acc + prior * self.strength) / (tested + self.strength)

    def tested(self, key) -> int:
        """How many times ``key`` was tested."""
        return int(self._counts.get(key, (0.0, 0.0))[1])

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
