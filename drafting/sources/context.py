"""Context matching (prompt lookup): find the longest n-gram that ends the text and occurred before, and
propose what followed it. The index is incremental: appending tokens never rescans the text."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Match:
    chain: list[int]  # proposed continuation
    ngram: int  # length of the matched suffix n-gram (0 = no match)
    occurrences: list[int]  # end positions of earlier occurrences of that n-gram, oldest first


NO_MATCH = Match(chain=[], ngram=0, occurrences=[])


class ContextIndex:
    """n-gram -> end positions, for each n in ``ngram_sizes``, over prompt + generated tokens."""

    def __init__(self, ngram_sizes=(3, 2)):
        self.sizes = tuple(sorted(set(ngram_sizes), reverse=True))
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
        return [h for h in hits if h < end]

    def match(self, max_tokens: int) -> Match:
        """Longest-suffix match, most recent occurrence first; the continuation is at most ``max_tokens``."""
        toks = self.tokens
        for n in self.sizes:
            occ = self.occurrences(n)
            if occ:
                start = occ[-1] + 1
                return Match(chain=toks[start : start + max_tokens], ngram=n, occurrences=occ)
        return NO_MATCH
