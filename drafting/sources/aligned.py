"""The text an answer is copying, with a pointer into it: the source for edits.

Asked to change a file it was given, a model writes most of the file again. The reference is everything before
the answer (the prompt: the file, the instruction, in a chat the earlier answers too); a pointer marks where in
it the answer stands. While the answer follows the reference the pointer moves on with every token and the
chain is simply the reference from the pointer on, however long.

Where the answer departs (an insertion, a deletion, a replacement), the pointer is left at the departure (the
anchor) and the answer is re-aligned as soon as it returns: its last few tokens (3, then 2, then 1) are looked up
in the reference, forward of the anchor first (a deletion skips text ahead), then behind it. Longer keys may
match anywhere; a two-token key only within ``near`` tokens of the anchor and a single token only within
``step`` tokens forward of it (a line replaced: the next newline of the reference), so a common token does not
throw the pointer across the file. The first alignment, before the answer has followed anything, takes the
latest occurrence of the longest key: the file usually comes last in the prompt.

While the answer is off the reference, the text from the anchor on is still offered (``returning``): the
answer's likeliest next move is to come back exactly where it left, once the inserted part ends.

A lookup costs a few dictionary reads and a bisection, whatever the reference's length.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import lru_cache

from drafting.engine.tree import ALIGNED

KEYS = (3, 2, 1)  # lengths of the answer's tail looked up to re-align, longest first
CANDIDATES = 32  # occurrences of a key weighed on each side of the anchor (the nearest): a lookup's cost is bounded
AGREE = 24  # tokens of agreement with the answer measured back from an occurrence
RUN_BUCKETS = (0, 1, 4, 16, 64)  # tokens followed since the last alignment, told apart where acceptance is learned

HELD = "held"  # the answer is following the reference: the chain is the text at the pointer
RETURN = "return"  # the answer left the reference: the chain is the text where it left, should it come back


def run_bucket(run: int) -> int:
    """The bucket of how many tokens the answer has followed the reference since its last (re-)alignment."""
    return RUN_BUCKETS[bisect_right(RUN_BUCKETS, run) - 1]


@dataclass(frozen=True)
class Alignment:
    """A chain from the reference and what it rests on, for pricing: ``state`` HELD or RETURN, ``key`` the length
    of the tail that last aligned the answer, ``run`` the tokens followed since."""

    chain: list[int]
    state: str
    key: int
    run: int

    @property
    def kind(self) -> tuple:
        """What the acceptance of its tokens is learned under."""
        return (self.state, self.key, run_bucket(self.run))


NO_ALIGNMENT = Alignment(chain=[], state="", key=0, run=0)

DEPTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # depths told apart in an aligned chain's acceptance
# A chain's first token, before any evidence, by the tokens the answer has followed since it was last aligned
# (RUN_BUCKETS): right after a re-alignment the pointer is a guess; after a few tokens followed it is usually
# right, and a long run rarely breaks. Deeper tokens go on as the text does. Measured on the embedded model's
# answers to the public edit set: 0.33-0.59 / 0.69-0.81 / 0.87-0.90 / 0.96-0.99 / 0.99, deeper 0.92-0.97.
HELD_FIRST = {0: 0.45, 1: 0.7, 4: 0.85, 16: 0.95, 64: 0.97}
DEEP = 0.93
RETURN_FIRST = 0.03  # the way back: one guess among the many places an insertion may end (measured: 0.01-0.03)


@lru_cache(maxsize=512)
def chain_plan(kind: tuple, length: int) -> tuple[tuple, tuple]:
    """(keys, priors) of the first ``length`` tokens of an alignment's chain, for pricing: each token's acceptance
    is learned under its alignment's kind (state, aligning key, run bucket) and its depth bucket, and starts from
    the prior above; made once per kind and length, not per step."""
    state, _, run = kind
    first = HELD_FIRST[run] if state == HELD else RETURN_FIRST
    keys = tuple((ALIGNED, *kind, max(d for d in DEPTHS if d <= depth)) for depth in range(1, length + 1))
    return keys, (first,) + (DEEP,) * (length - 1)


class AlignedText:
    """A reference text, the answer written against it so far, and where the answer stands in it."""

    def __init__(self, reference: list[int], near: int = 256, step: int = 48, keys: tuple[int, ...] = KEYS):
        if near < 1 or step < 1 or not keys or min(keys) < 1:
            raise ValueError("AlignedText needs near and step of at least 1 and key lengths of at least 1.")
        self.reference = [int(t) for t in reference]
        self.near = near
        self.step = step
        self.keys = tuple(sorted(set(keys), reverse=True))
        self._index: dict[int, dict[tuple, list[int]]] = {k: {} for k in self.keys}  # key -> end positions, ascending
        for end in range(len(self.reference)):
            self._index_end(end)
        self.tail: list[int] = []  # the answer's last tokens (enough for the longest key)
        self.pointer: int | None = None  # the reference position of the answer's next token, while it follows
        self.anchor: int | None = None  # where the answer last left the reference
        self.key = 0  # the tail length that last aligned the answer
        self.run = 0  # tokens followed since
        self.departures = 0  # times the answer left the reference
        self.returns = 0  # times it was re-aligned after leaving

    @property
    def aligned(self) -> bool:
        return self.pointer is not None

    def _index_end(self, end: int) -> None:
        ref = self.reference
        for k in self.keys:
            if end + 1 >= k:
                self._index[k].setdefault(tuple(ref[end - k + 1: end + 1]), []).append(end)

    def extend(self, tokens) -> None:
        """The answer's next tokens: move the pointer along, or leave the reference and look for the way back.
        Each token then joins the reference, so the answer's own earlier text can be followed too (a list
        written twice, a loop)."""
        ref = self.reference
        longest = self.keys[0]
        for t in tokens:
            t = int(t)
            self.tail.append(t)
            if len(self.tail) > longest:
                del self.tail[0]
            p = self.pointer
            if p is not None and p < len(ref) and ref[p] == t:
                self.pointer = p + 1
                self.run += 1
            else:
                if p is not None:
                    self.anchor = p
                    self.pointer = None
                    self.departures += 1
                self._realign(t)  # before the token is indexed: the tail must not find itself
            ref.append(t)
            self._index_end(len(ref) - 1)

    def _realign(self, token: int) -> None:
        """Point at where the answer, which just wrote ``token``, stands in the reference again, if a key of its
        tail says so."""
        for k in self.keys:
            if len(self.tail) < k:
                continue
            hits = self._index[k].get(tuple(self.tail[-k:]))
            if not hits:
                continue
            end = self._choose(hits, k, token)
            if end is not None:
                if self.anchor is not None:
                    self.returns += 1
                self.pointer, self.key, self.run = end + 1, k, 0
                return

    def _choose(self, hits: list[int], k: int, token: int) -> int | None:
        """The end position to align to among ``hits`` of a ``k``-token key (ascending): of those within the reach
        a key of that length is trusted with (any for three tokens, ``near`` for two, ``step`` forward for one;
        before any departure, the latest of a key of two tokens or more), the one whose text agrees longest with
        the answer's (up to AGREE tokens back), the nearest to the anchor on a tie, forward of it first (a
        deletion skips ahead; an end at anchor - 1 + d continues at anchor + d)."""
        anchor = self.anchor
        if anchor is None:
            return hits[-1] if k >= 2 else None
        at = anchor - 1
        i = bisect_left(hits, at)
        reach = self.step if k == 1 else self.near if k == 2 else None
        ahead = hits[i: i + CANDIDATES]
        behind = [] if k == 1 else hits[max(0, i - CANDIDATES): i][::-1]
        if reach is not None:
            ahead = [e for e in ahead if e - at <= reach]
            behind = [e for e in behind if at - e <= reach]
        best, best_agree = None, -1
        for end in sorted(ahead + behind, key=lambda e: (e < at, abs(e - at))):  # nearest first, forward first
            agree = self._agreement(end, token)
            if agree > best_agree:
                best, best_agree = end, agree
        return best

    def _agreement(self, end: int, token: int) -> int:
        """How many tokens the reference ending at ``end`` agrees with the answer's text ending with ``token``."""
        ref = self.reference
        if ref[end] != token:
            return 0
        n, last = 1, len(ref) - 1  # the answer's text is ref + [token]: its j-th token back is ref[last + 1 - j]
        while n < AGREE and end - n >= 0 and ref[end - n] == ref[last + 1 - n]:
            n += 1
        return n

    def lookup(self, limit: int) -> Alignment:
        """The reference's continuation of the answer, at most ``limit`` tokens: from the pointer while the answer
        follows, from the anchor while it is off (RETURN), nothing before the first alignment."""
        if limit <= 0:
            return NO_ALIGNMENT
        ref = self.reference
        if self.pointer is not None:
            at, state = self.pointer, HELD
        elif self.anchor is not None:
            at, state = self.anchor, RETURN
        else:
            return NO_ALIGNMENT
        chain = ref[at: at + limit]
        if not chain:
            return NO_ALIGNMENT
        return Alignment(chain=chain, state=state, key=self.key, run=self.run)
