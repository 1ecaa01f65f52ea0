"""One request's GOOSE chain drafter for engines that verify chains, not trees (vLLM's non-EAGLE methods).

The chain is GOOSE's spine, taken from the source expected to get the most of it accepted:

- the context matcher's continuation (n-grams 5/4/3, consensus, confidence, chain extension past 20 tokens
  when confident), its length the spine share GOOSE would give it, from the spine-acceptance EMA tiers pulled
  towards the full chain by confidence, applied to the engine's draft limit; a consensus match is drafted
  whole (GOOSE's bypass);
- the request's own text read the same way as the memory below: of the earlier occurrences of its longest
  suffix (down to one token), the continuation most of them agree on, where the context matcher follows the
  most recent one;
- the memory of earlier outputs (drafting.sources.output_memory): what followed the longest suffix of the
  stream in other requests' answers, the continuation most of them agree on;
- arctic-inference's suffix trees where installed (drafting.sources.suffix_trees): the chain vLLM's suffix
  decoding would draft, from the request's own text and every earlier answer;
- the text the request is copying (an edited file in the prompt, or its own earlier text), read at the pointer
  drafting.sources.aligned keeps into it while the answer follows it: long chains while an edit copies the file;
- where none has anything, a walk through the token-id adjacency table, its length bounded by that
  source's own acceptance EMA.

The proposer scores the candidates (``propose(limit, score)``) by the acceptance it has measured for each kind
of draft at each depth. Acceptance is read from what the engine committed since the previous proposal, for the
chain drafted and, as far as the committed tokens tell, for the candidates not taken.
"""

from __future__ import annotations

import math

from drafting.sources.context import SpineMatcher
from drafting.engine.tree import ALIGNED, MEMORY, OWN_TEXT
from drafting.sources.aligned import HELD, AlignedText, run_bucket
from drafting.sources.output_memory import MAX_MATCH, MemoryMatch, OutputMemory, TextMemory, match_bucket
from drafting.sources.suffix_trees import SuffixMatch, SuffixTrees
from drafting.speculators.goose import EMA_ALPHA, base_ratio
from drafting.integrations.batch_budget import ChainAcceptance
from drafting.integrations.token_adjacency import TokenAdjacency

SPINE = "spine"
TABLE = "table"
SUFFIX_TREES = "suffix"
SOURCES = (SPINE, OWN_TEXT, MEMORY, SUFFIX_TREES, ALIGNED, TABLE)
# Earlier occurrences of the matched n-gram the consensus check reads (the most recent): a context repeating one
# token or bigram tens of thousands of times would otherwise make every proposal walk all of them.
MAX_OCCURRENCES = 256


def spine_length(chain_len: int, confidence: float, consensus: bool, ema: float, limit: int) -> int:
    """Tokens of the context chain to draft: all of it (up to ``limit``) on consensus, else the GOOSE spine
    ratio base(EMA) + conf * (1 - base) of ``limit``, at least one token."""
    if chain_len <= 0 or limit <= 0:
        return 0
    if consensus:
        return min(chain_len, limit)
    b = base_ratio(ema)
    return min(chain_len, max(1, math.floor(limit * (b + confidence * (1 - b)))))


def table_length(ema: float, limit: int) -> int:
    """Tokens of an adjacency chain to try: the EMA tier's share of ``limit``, at least one."""
    return max(1, math.floor(limit * base_ratio(ema))) if limit > 0 else 0


def table_floor(ema: float, min_path: float) -> float:
    """The path share an adjacency chain must keep: doubled while that source is mostly rejected, so a
    request whose table drafts keep failing pays for a draft only on transitions seen more than once."""
    return min(0.95, 2 * min_path) if ema < 0.2 else min_path


def memory_kind(found: MemoryMatch, source: str = MEMORY) -> tuple:
    """The kind of a memory chain: its matched length (bucketed) and whether its occurrences agreed."""
    return (source, match_bucket(found.match), found.consensus)


def suffix_kind(found: SuffixMatch) -> tuple:
    """The kind of a suffix-tree chain: its matched length (bucketed) and whether its first token is the
    continuation of most earlier occurrences."""
    return (SUFFIX_TREES, match_bucket(found.match), bool(found.probs) and found.probs[0] >= 0.5)


def agreement(chain: list[int], committed: list[int]) -> tuple[int, int]:
    """(got, tried) of a candidate chain, drafted, cut or not drafted at all, as the committed tokens tell it: the
    leading tokens that agree, and how many were decided (one past them where a token disagreed)."""
    known = min(len(chain), len(committed))
    got = 0
    while got < known and chain[got] == committed[got]:
        got += 1
    return got, (got + 1 if got < known else got)


class RequestChain:
    """Drafting state of one request: its token stream, matcher, its output in the memory and acceptance EMAs."""

    HEAD = 16  # tokens that, with the length and the last TAIL tokens, recognise the request in a batch row
    TAIL = 4

    def __init__(self, tokens: list[int], table: TokenAdjacency, chain: int = 20, chain_max: int = 100,
                 min_path: float = 0.3, full_spine: bool = False, ngram_sizes=(5, 4, 3),
                 vocab_size: int | None = None, memory: OutputMemory | None = None, output_from: int | None = None,
                 own: bool = True, suffix_trees: SuffixTrees | None = None, aligned: bool = True):
        self.table = table
        self.min_path = min_path
        self.full_spine = full_spine  # draft the whole context chain up to the limit, whatever the EMA
        self.vocab_size = vocab_size  # drafts stop before an id the model does not have (None: unknown)
        self.matcher = SpineMatcher(ngram_sizes=ngram_sizes, chain=chain, chain_max=chain_max,
                                    max_occurrences=MAX_OCCURRENCES)
        self.matcher.reset(tokens)
        self.own = TextMemory() if own else None
        if self.own is not None:
            self.own.extend(tokens)
        table.learn(tokens)
        # this request's answer is remembered as it is written (other requests draft from it at once); the
        # tokens from ``output_from`` on are answer already (the engine's first token)
        self.memory = memory
        answer_from = len(tokens) if output_from is None else output_from
        self.output = memory.open() if memory is not None else None
        if memory is not None:
            memory.extend(self.output, tokens[answer_from:])
        # the pointer into what the answer may copy: the prompt, then the answer's own text as it is written
        self.aligned = AlignedText(tokens[:answer_from]) if aligned else None
        if self.aligned is not None:
            self.aligned.extend(tokens[answer_from:])
        self.suffix_trees = suffix_trees
        if suffix_trees is not None:
            self.suffix_handle = suffix_trees.open(tokens[:answer_from], tokens[answer_from:])
        self.head = tuple(tokens[: self.HEAD])
        self.ema = {s: 0.5 for s in SOURCES}
        self.last_draft: list[int] = []
        self.last_source = ""
        self.last_kind: tuple = ()  # the source and what it matched: the step budget's acceptance is kept per kind
        self.offered: list[tuple[tuple, list[int]]] = []  # (kind, whole chain) of every candidate of the last call
        self.outcomes: list[tuple[tuple, int, int]] = []  # (kind, got, tried) of each, as the committed tokens tell
        self.drafted = {s: 0 for s in SOURCES}
        self.accepted = {s: 0 for s in SOURCES}
        self.acceptance = {s: ChainAcceptance() for s in SOURCES}  # per-token, for the step budget

    @property
    def tokens(self) -> list[int]:
        return self.matcher.tokens

    def __len__(self) -> int:
        return len(self.matcher.tokens)

    def same_request(self, row, known: int) -> bool:
        """Whether a batch row whose first ``known`` tokens were known last call is this request."""
        toks = self.matcher.tokens
        if known != len(toks):
            return False
        if tuple(int(t) for t in row[: len(self.head)]) != self.head:  # a stream shorter than HEAD at first
            return False
        tail = max(0, known - self.TAIL)
        return [int(t) for t in row[tail:known]] == toks[tail:]

    def advance(self, committed: list[int]) -> int:
        """Take the tokens the engine committed since the last call (accepted drafts + its own token); returns
        how many of the last draft were accepted, and moves that source's EMA."""
        got = 0
        draft = self.last_draft
        while got < len(draft) and got < len(committed) - 1 and committed[got] == draft[got]:
            got += 1
        if draft:
            src = self.last_source
            self.ema[src] = (1 - EMA_ALPHA) * self.ema[src] + EMA_ALPHA * (got / len(draft))
            self.drafted[src] += len(draft)
            self.accepted[src] += got
            self.acceptance[src].observe(got, len(draft))
        self.outcomes = [(kind, *agreement(chain, committed)) for kind, chain in self.offered]
        self.offered = []
        toks = self.matcher.tokens
        prev = toks[-1] if toks else -1
        prev2 = toks[-2] if len(toks) > 1 else -1
        self.table.learn(committed, prev, prev2)
        self.matcher.extend(committed)
        if self.own is not None:
            self.own.extend(committed)
        if self.memory is not None:
            self.memory.extend(self.output, committed)
        if self.aligned is not None:
            self.aligned.extend(committed)
        if self.suffix_trees is not None:
            self.suffix_trees.extend(self.suffix_handle, committed)
        self.last_draft, self.last_source = [], ""
        return got

    def candidates(self, limit: int) -> list[tuple[tuple, list[int]]]:
        """(kind, chain) of each source with something to draft, the context's (matcher and own text) and the
        memory's first; the adjacency table's only where none has anything."""
        out = []
        toks = self.matcher.tokens
        m = self.matcher.spine(extend=True)
        if m.chain:
            n = spine_length(len(m.chain), m.confidence, m.consensus or self.full_spine, self.ema[SPINE], limit)
            out.append(((SPINE, m.ngram, m.consensus), [int(t) for t in m.chain[:n]]))
        if self.own is not None:
            found = self.own.lookup(limit)
            if found.chain:
                out.append((memory_kind(found, OWN_TEXT), found.chain))
        if self.memory is not None:
            found = self.memory.lookup(toks[-MAX_MATCH - 1:], limit, exclude=self.output)
            if found.chain:
                out.append((memory_kind(found), found.chain))
        if self.suffix_trees is not None:
            found = self.suffix_trees.lookup(self.suffix_handle, toks, limit)
            if found.chain:
                out.append((suffix_kind(found), found.chain))
        if self.aligned is not None:
            found = self.aligned.lookup(limit)
            if found.state == HELD:  # the way back after a departure is one guess of many: no chain for it
                out.append(((ALIGNED, found.key, run_bucket(found.run)), found.chain))
        if not out:
            prev = toks[-2] if len(toks) > 1 else -1
            ema = self.ema[TABLE]
            chain = self.table.chain(prev, toks[-1], table_length(ema, limit), table_floor(ema, self.min_path))
            out.append(((TABLE,), chain))
        if self.vocab_size is not None:
            out = [(kind, within_vocab(chain, self.vocab_size)) for kind, chain in out]
        return [(kind, chain) for kind, chain in out if chain]

    def propose(self, limit: int, score=None) -> list[int]:
        """A chain of at most ``limit`` tokens (possibly empty) to follow the stream: of the sources' candidates
        the one ``score(kind, chain)`` rates highest (the expected accepted tokens; without it, the first)."""
        draft: list[int] = []
        self.last_kind, self.offered = (), []
        if limit > 0 and self.matcher.tokens:
            self.offered = found = self.candidates(limit)
            if found:
                best = max(range(len(found)), key=lambda i: score(*found[i])) if score and len(found) > 1 else 0
                self.last_kind, draft = found[best]
        self.last_draft, self.last_source = draft, (self.last_kind[0] if draft else "")
        return draft

    def close(self) -> None:
        """The request left the batch: sources holding per-request state let it go."""
        if self.suffix_trees is not None:
            self.suffix_trees.close(self.suffix_handle)

    def keep(self, n: int) -> list[int]:
        """Cut the last proposal to its first ``n`` tokens (the step budget kept those); what is verified of it is
        what the EMAs learn from."""
        self.last_draft = self.last_draft[:n]
        if not self.last_draft:
            self.last_source = ""
        return self.last_draft


def within_vocab(draft: list[int], vocab_size: int) -> list[int]:
    """The draft up to its first id outside 0..vocab_size-1: a chain is verified in order, so what follows a token
    the model cannot have is no draft either (and an id past the vocabulary would index past the logits)."""
    for i, t in enumerate(draft):
        if not 0 <= t < vocab_size:
            return draft[:i]
    return draft
