"""A successor table learned from token ids alone: for every token (unigram tier) and every (previous token,
token) pair (bigram tier, consulted first), how often each next token followed it.

vLLM hands a proposer token ids, never logits, so goose's logit-harvesting adjacency table
(drafting/sources/adjacency.py) cannot be filled there; counting the streams the engine has seen is what is
left. One table serves every request of the process, so a request starts with what earlier requests taught
it (hot start).

Its size is bounded whatever the streams: each tier holds at most ``capacity`` contexts (a full tier is forgotten
and starts again) and each context at most ``keep`` successors, so the table never holds more than
``max_entries`` = 2 x capacity x keep counts.
"""

from __future__ import annotations

CAPACITY = 1 << 20  # contexts per tier
KEEP = 4  # successors per context


class TokenAdjacency:
    """Successor counts over token streams. ``learn`` appends transitions, ``chain`` walks the best ones."""

    def __init__(self, capacity: int = CAPACITY, keep: int = KEEP):
        self.capacity = capacity  # contexts kept per tier; a full tier is forgotten and starts again
        self.keep = keep  # successors kept per context (the most frequent)
        self._uni: dict[int, dict[int, int]] = {}
        self._bi: dict[tuple[int, int], dict[int, int]] = {}

    def __len__(self) -> int:
        return len(self._uni)

    @property
    def max_entries(self) -> int:
        """The most successor counts the table can hold (both tiers)."""
        return 2 * self.capacity * self.keep

    def entries(self) -> int:
        """Successor counts held now (both tiers)."""
        return sum(len(row) for tier in (self._uni, self._bi) for row in tier.values())

    def learn(self, tokens, prev: int = -1, prev2: int = -1) -> None:
        """Count the transitions inside ``tokens``; ``prev2, prev`` are the two tokens before it (-1 = none)."""
        for t in tokens:
            t = int(t)
            if prev >= 0:
                self._count(self._uni, prev, t)
                if prev2 >= 0:
                    self._count(self._bi, (prev2, prev), t)
            prev2, prev = prev, t

    def _count(self, tier: dict, key, nxt: int) -> None:
        row = tier.get(key)
        if row is None:
            if len(tier) >= self.capacity:
                tier.clear()
            tier[key] = {nxt: 1}
            return
        row[nxt] = row.get(nxt, 0) + 1
        if len(row) > self.keep:  # drop the rarest so a row stays a handful of entries
            del row[min(row, key=row.__getitem__)]

    def best(self, prev: int, tok: int) -> tuple[int, float]:
        """The most frequent successor of ``tok`` (after ``prev``) and its smoothed share c / (total + 1),
        so a transition seen once is worth 0.5, never certainty; (-1, 0.0) when nothing is known."""
        row = self._bi.get((prev, tok)) if prev >= 0 else None
        if not row:
            row = self._uni.get(tok)
        if not row:
            return -1, 0.0
        nxt = max(row, key=row.__getitem__)
        return nxt, row[nxt] / (sum(row.values()) + 1)

    def chain(self, prev: int, tok: int, max_len: int, min_path: float = 0.3) -> list[int]:
        """Follow the best successor from ``tok`` while the product of shares stays >= ``min_path``."""
        out: list[int] = []
        path = 1.0
        while len(out) < max_len:
            nxt, share = self.best(prev, tok)
            path *= share
            if nxt < 0 or path < min_path:
                break
            out.append(nxt)
            prev, tok = tok, nxt
        return out
