"""Context matching (prompt lookup): find the longest n-gram that ends the text and occurred before, and
propose what followed it. The index is incremental: appending tokens never rescans the text."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass


@dataclass
class Match:
    chain: list[int]  # proposed continuation
    ngram: int  # length of the matched suffix n-gram (0 = no match)
    occurrences: list[int]  # end positions of earlier occurrences of that n-gram, oldest first


NO_MATCH = Match(chain=[], ngram=0, occurrences=[])


class ContextIndex:
    """n-gram -> end positions, for each n in ``ngram_sizes``, over prompt + generated tokens.

    ``max_occurrences`` caps the earlier occurrences a lookup reports (the most recent ones), so a lookup costs the
    same however often its n-gram repeats (a token or bigram repeated tens of thousands of times in a long
    context); None reports them all."""

    def __init__(self, ngram_sizes=(3, 2), max_occurrences: int | None = None):
        self.sizes = tuple(sorted(set(ngram_sizes), reverse=True))
        self.max_occurrences = max_occurrences
        self.tokens: list[int] = []
        self._index: dict[int, dict[tuple, list[int]]] = {n: {} for n in self.sizes}

    def reset(self, tokens: list[int]) -> None:
        self.tokens = []
        self._index = {n: {} for n in self.sizes}
        self.extend(tokens)

    def extend(self, tokens) -> None:
        toks = self.tokens
        for t in tokens:
            toks.append(int(t))
            end = len(toks) - 1
            for n in self.sizes:
                if end + 1 >= n:
                    self._index[n].setdefault(tuple(toks[end - n + 1 : end + 1]), []).append(end)

    def occurrences(self, n: int, end: int | None = None) -> list[int]:
        """Earlier end positions of the n-gram that ends at ``end`` (default: the text's end)."""
        toks = self.tokens
        end = len(toks) - 1 if end is None else end
        if end + 1 < n:
            return []
        hits = self._index[n].get(tuple(toks[end - n + 1 : end + 1]), [])
        stop = bisect_left(hits, end)  # positions are appended in order: the earlier ones are a prefix
        start = 0 if self.max_occurrences is None else max(0, stop - self.max_occurrences)
        return hits[start:stop]

    def match(self, max_tokens: int) -> Match:
        """Longest-suffix match, most recent occurrence first; the continuation is at most ``max_tokens``."""
        toks = self.tokens
        for n in self.sizes:
            occ = self.occurrences(n)
            if occ:
                start = occ[-1] + 1
                return Match(chain=toks[start : start + max_tokens], ngram=n, occurrences=occ)
        return NO_MATCH


@dataclass
class SpineMatch:
    """A context chain with the paper's confidence (GOOSE)."""

    chain: list[int]
    confidence: float
    ngram: int
    consensus: bool  # >= 2 earlier occurrences of the matched n-gram, all followed by the same token


NO_SPINE = SpineMatch(chain=[], confidence=0.0, ngram=0, consensus=False)


def match_confidence(chain_len: int, consensus: bool, long_match: int = 8) -> float:
    """1.0 on consensus; for a chain of L >= 8 tokens min(0.9, 0.7 + 0.2 (L - 8) / 12); else 0.6 L / 8."""
    if chain_len <= 0:
        return 0.0
    if consensus:
        return 1.0
    if chain_len >= long_match:
        return min(0.9, 0.7 + 0.2 * (chain_len - long_match) / 12)
    return 0.6 * chain_len / long_match


class SpineMatcher(ContextIndex):
    """GOOSE's context matcher: n-gram lengths (5, 4, 3) longest first, a chain of up to ``chain`` tokens,
    extended up to ``chain_max`` by re-matching from the chain's end while confidence > ``extend_above``.
    With ``max_occurrences`` set, consensus is read over that many most recent occurrences."""

    def __init__(self, ngram_sizes=(5, 4, 3), chain: int = 20, chain_max: int = 100, extend_above: float = 0.6,
                 max_occurrences: int | None = None):
        super().__init__(ngram_sizes, max_occurrences)
        self.chain_len = chain
        self.chain_max = chain_max
        self.extend_above = extend_above

    def spine(self, extend: bool = True) -> SpineMatch:
        toks = self.tokens
        m = self.match(self.chain_len)
        if not m.chain:
            return NO_SPINE
        follow = {toks[h + 1] for h in m.occurrences if h + 1 < len(toks)}
        consensus = len(m.occurrences) >= 2 and len(follow) == 1
        conf = match_confidence(len(m.chain), consensus)
        chain = list(m.chain)
        if extend and conf > self.extend_above:
            self._extend(chain)
        return SpineMatch(chain=chain, confidence=conf, ngram=m.ngram, consensus=consensus)

    def _extend(self, chain: list[int]) -> None:
        """Re-match the n-gram ending the chain against the real text and append what followed it."""
        toks = self.tokens
        while len(chain) < self.chain_max:
            seq = toks[-self.sizes[0]:] + chain  # the text as it would read after the chain
            grown = False
            for n in self.sizes:
                hits = self._index[n].get(tuple(seq[-n:]))
                if not hits:
                    continue
                start = hits[-1] + 1
                more = toks[start : start + self.chain_max - len(chain)]
                if more:
                    chain.extend(more)
                    grown = True
                break
            if not grown:
                return


def catch_up(index, context: list[int]) -> bool:
    """Extend a context index (drafting.sources.context) to ``context`` if what it holds is a prefix of it; the
    result is the index ``reset(context)`` would build, without re-reading the whole conversation."""
    seen = index.tokens
    if len(seen) > len(context) or context[: len(seen)] != seen:
        return False
    index.extend(context[len(seen):])
    return True
