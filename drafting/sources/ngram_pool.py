"""Lookahead's n-gram pool: for each key token, at most ``per_key`` n-grams that followed it, least recently
used evicted first. Drafts for a key come back most recently used first."""

from __future__ import annotations

from collections import OrderedDict


class NgramPool:
    def __init__(self, per_key: int = 7):
        self.per_key = per_key
        self._pool: dict[int, OrderedDict[tuple, None]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._pool.values())

    def clear(self) -> None:
        self._pool.clear()

    def add(self, key: int, continuation) -> None:
        """Remember that ``continuation`` followed ``key``; an n-gram seen again becomes most recent."""
        cont = tuple(int(t) for t in continuation)
        if not cont or self.per_key < 1:
            return
        grams = self._pool.get(key)
        if grams is None:
            grams = self._pool[int(key)] = OrderedDict()
        if cont in grams:
            grams.move_to_end(cont)
            return
        grams[cont] = None
        if len(grams) > self.per_key:
            grams.popitem(last=False)

    def get(self, key: int, limit: int | None = None) -> list[tuple]:
        """The n-grams after ``key``, most recent first."""
        grams = self._pool.get(int(key))
        if not grams:
            return []
        out = list(reversed(grams))
        return out if limit is None else out[:limit]

    def seed(self, tokens, n: int) -> None:
        """Add every n-gram of ``tokens`` (key = its first token, continuation = the next n - 1 tokens)."""
        toks = list(tokens)
        for i in range(len(toks) - n + 1):
            self.add(toks[i], toks[i + 1 : i + n])
