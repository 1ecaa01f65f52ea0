"""A memory of earlier outputs as a token source: what followed the longest suffix of the current text in
outputs generated before (other requests' answers, finished or still being written), the continuation most of
them agree on, weighted by how often it was seen.

A server (or a bench, or a chat) answers many similar requests: code with the same idioms, arithmetic in the
same sentence frames, the same openings. The context matcher (drafting.sources.context) sees only the current
request; this source sees every earlier answer, as suffix decoding's global tree does. A lookup finds the
earlier occurrences of the text's last 4 tokens (else 2), measures how far back each agrees with the text (up
to MAX_MATCH tokens), keeps those agreeing longest (the occurrences of the longest matched suffix) and walks
their continuations: at each depth the token most of the surviving occurrences continue with, while that
path's share of them stays at least ``min_share``.

Bounded: at most ``max_tokens`` tokens are held; past that the oldest outputs are forgotten first, and the index
is rebuilt once forgotten entries outnumber live ones. A lookup reads at most ``max_occurrences`` of the most
recent occurrences, so its cost does not grow with the memory.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

KEY_SIZES = (4, 2)  # n-grams indexed: a lookup starts from the longest that occurred before
MAX_MATCH = 16  # tokens of agreement measured backwards from the text's end (a match's length is at most this)
SEQ_SHIFT = 32  # an index entry is seq << SEQ_SHIFT | end position
MATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16)  # match lengths told apart where acceptance is learned per kind of match


def match_bucket(match: int) -> int:
    """The bucket of a matched suffix length: the largest of MATCH_BUCKETS not above it."""
    return max(b for b in MATCH_BUCKETS if b <= max(match, MATCH_BUCKETS[0]))


@dataclass
class MemoryMatch:
    chain: list[int]  # the proposed continuation
    match: int  # length of the matched suffix (0: nothing matched)
    support: int  # earlier occurrences of that suffix the chain was read from
    shares: list[float] = field(default_factory=list)  # per chain token: the share of them continuing so far

    @property
    def consensus(self) -> bool:
        """At least two occurrences, all continuing with the chain's first token."""
        return self.support >= 2 and bool(self.shares) and self.shares[0] >= 1.0


NO_MEMORY = MemoryMatch(chain=[], match=0, support=0)


class OutputMemory:
    """Earlier outputs, indexed by their n-grams; ``lookup`` proposes a continuation of a text."""

    def __init__(self, max_tokens: int = 1 << 19, max_occurrences: int = 64, min_share: float = 0.1,
                 key_sizes: tuple[int, ...] = KEY_SIZES):
        if max_tokens < 1 or max_occurrences < 1 or not 0 < min_share <= 1 or not key_sizes or min(key_sizes) < 1:
            raise ValueError("OutputMemory needs max_tokens and max_occurrences of at least 1, min_share in (0, 1] "
                             "and n-gram key sizes of at least 1.")
        self.max_tokens = max_tokens
        self.max_occurrences = max_occurrences
        self.min_share = min_share
        self.key_sizes = tuple(sorted(set(key_sizes), reverse=True))
        self._seqs: dict[int, list[int]] = {}  # output id -> its tokens, oldest output first
        self._index: dict[int, dict[tuple, list[int]]] = {n: {} for n in self.key_sizes}
        self._next_id = 0
        self._held = 0  # tokens of the outputs held
        self._dead = 0  # index entries of forgotten outputs, still in the index

    def __len__(self) -> int:
        """Tokens held."""
        return self._held

    @property
    def outputs(self) -> int:
        return len(self._seqs)

    def tokens(self, seq: int) -> list[int]:
        """Output ``seq``'s tokens: the memory's own list, grown by ``extend`` (read it, do not change it)."""
        return self._seqs[seq]

    def open(self) -> int:
        """Start an output; its tokens come with ``extend``. Returns its id."""
        seq = self._next_id
        self._next_id += 1
        self._seqs[seq] = []
        return seq

    def add(self, tokens) -> int:
        """Remember a whole output at once; returns its id."""
        seq = self.open()
        self.extend(seq, tokens)
        return seq

    def extend(self, seq: int, tokens) -> None:
        """Append tokens to output ``seq`` (a forgotten output takes no more)."""
        toks = self._seqs.get(seq)
        if toks is None:
            return
        added = 0
        for t in tokens:
            toks.append(int(t))
            added += 1
            self._index_end(seq, toks, len(toks) - 1)
        self._held += added
        while self._held > self.max_tokens and len(self._seqs) > 1:
            self._forget_oldest(keep=seq)

    def _forget_oldest(self, keep: int) -> None:
        oldest = next(s for s in self._seqs if s != keep)
        gone = len(self._seqs.pop(oldest))
        self._held -= gone
        self._dead += gone * len(self.key_sizes)
        if self._dead > self._held * len(self.key_sizes):
            self._rebuild()

    def _rebuild(self) -> None:
        self._index = {n: {} for n in self.key_sizes}
        for seq, toks in self._seqs.items():
            for end in range(len(toks)):
                self._index_end(seq, toks, end)
        self._dead = 0

    def _index_end(self, seq: int, toks: list[int], end: int) -> None:
        """Index the n-grams of output ``seq`` that end at position ``end``."""
        for n in self.key_sizes:
            if end + 1 >= n:
                self._index[n].setdefault(tuple(toks[end - n + 1: end + 1]), []).append(seq << SEQ_SHIFT | end)

    def lookup(self, text: list[int], limit: int, exclude: int | None = None) -> MemoryMatch:
        """A continuation of ``text`` of at most ``limit`` tokens, read from outputs other than ``exclude``."""
        if limit <= 0:
            return NO_MEMORY
        for n in self.key_sizes:
            if len(text) < n:
                continue
            hits = self._index[n].get(tuple(text[-n:]))
            if not hits:
                continue
            found = self._longest(text, hits, n, exclude)
            if found:
                return self._walk(found, limit)
        return NO_MEMORY

    def _longest(self, text: list[int], hits: list[int], n: int, exclude: int | None):
        """(match length, [(tokens, end)]) for the most recent occurrences that agree longest with the text."""
        seqs = self._seqs
        best, found = 0, []
        read = 0
        for entry in reversed(hits):
            seq, end = entry >> SEQ_SHIFT, entry & ((1 << SEQ_SHIFT) - 1)
            toks = seqs.get(seq)
            if toks is None or seq == exclude or end + 1 >= len(toks):
                continue  # forgotten, the text's own output, or nothing after it yet
            read += 1
            agree = n
            top = min(MAX_MATCH, end + 1, len(text))
            while agree < top and toks[end - agree] == text[-agree - 1]:
                agree += 1
            if agree > best:
                best, found = agree, [(toks, end)]
            elif agree == best:
                found.append((toks, end))
            if read >= self.max_occurrences:
                break
        return (best, found) if found else None

    def _walk(self, found, limit: int) -> MemoryMatch:
        match, occ = found
        support = len(occ)
        chain: list[int] = []
        shares: list[float] = []
        alive = occ
        for depth in range(1, limit + 1):
            counts = Counter(toks[end + depth] for toks, end in alive if end + depth < len(toks))
            if not counts:
                break
            tok, count = counts.most_common(1)[0]
            share = count / support
            if share < self.min_share:
                break
            chain.append(tok)
            shares.append(share)
            alive = [(toks, end) for toks, end in alive if end + depth < len(toks) and toks[end + depth] == tok]
        return MemoryMatch(chain=chain, match=match, support=support, shares=shares)


TEXT_KEYS = (4, 2, 1)  # a text read as its own memory: a lone token that occurred before matches too


class TextMemory:
    """One text (a prompt and the answer so far) read as its own memory: the continuation the majority of the
    earlier occurrences of its longest suffix agree on, where the context matcher (drafting.sources.context)
    follows the most recent occurrence. It never forgets (the model's length bounds the text)."""

    def __init__(self, key_sizes: tuple[int, ...] = TEXT_KEYS):
        self._memory = OutputMemory(max_tokens=1 << 40, key_sizes=key_sizes)
        self._seq = self._memory.open()
        self.text = self._memory.tokens(self._seq)  # the memory's own list of the text's tokens

    def extend(self, tokens) -> None:
        self._memory.extend(self._seq, tokens)

    def lookup(self, limit: int) -> MemoryMatch:
        """A continuation of the text of at most ``limit`` tokens, read from the text's own earlier occurrences."""
        return self._memory.lookup(self.text[-MAX_MATCH - 1:], limit)
