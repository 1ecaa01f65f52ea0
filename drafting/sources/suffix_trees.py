"""Suffix trees over the prompt and over earlier answers, from arctic-inference, as one goose draft source.

arctic-inference's ``SuffixDecodingCache`` is the source vLLM's ``suffix`` method drafts from: a suffix tree of
each request's own text and one global tree of every answer written so far (the oldest evicted first), the
draft being the most frequent continuation of the longest match, its length capped by that match's length and
by a minimum estimated probability per token. Wrapped here so GOOSE can weigh its chains against its own
sources by their measured acceptance. arctic-inference is optional (vLLM's environment has it); without it the
source is simply absent. One ``SuffixTrees`` belongs to one proposer: never shared, so no proposer drafts from
another's answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

# vLLM's defaults for its suffix method (SpeculativeConfig.suffix_decoding_*), so the candidate is the one
# suffix decoding would draft
MAX_TREE_DEPTH = 24
MAX_CACHED_ANSWERS = 10000
MAX_SPEC_FACTOR = 1.0
MIN_TOKEN_PROB = 0.1


class SuffixTreesUnavailable(RuntimeError):
    """arctic-inference is not installed; one sentence."""


def _cache_class():
    """arctic-inference's SuffixDecodingCache, or None where the package is not installed."""
    try:
        from arctic_inference.suffix_decoding import SuffixDecodingCache
    except ImportError:
        return None
    return SuffixDecodingCache


def available() -> bool:
    """Whether arctic-inference's suffix trees can be used here."""
    return _cache_class() is not None


@dataclass
class SuffixMatch:
    chain: list[int]  # the proposed continuation
    match: int  # length of the matched suffix of the text
    probs: list[float] = field(default_factory=list)  # per chain token: its estimated probability along the path


class SuffixTrees:
    """Per-request suffix trees and a global tree of answers; requests are opened, extended, looked up, closed."""

    def __init__(self, max_depth: int = MAX_TREE_DEPTH, max_answers: int = MAX_CACHED_ANSWERS):
        cache_class = _cache_class()
        if cache_class is None:
            raise SuffixTreesUnavailable("The suffix-tree source needs the package arctic-inference, which is not "
                                         "installed here (make vllm-setup builds it).")
        self.max_depth = max_depth
        self._cache = cache_class(max_tree_depth=max_depth, max_cached_requests=max_answers)
        self._ids = count()

    @property
    def open_requests(self) -> int:
        """Requests opened and not yet closed (each holds its prompt's tree)."""
        return len(self._cache.active_requests)

    def open(self, prompt: list[int], answer: list[int] | None = None) -> int:
        """Start a request on its prompt (and the answer written so far); returns its handle."""
        handle = next(self._ids)
        self._cache.start_request(handle, prompt)
        self.extend(handle, answer)
        return handle

    def extend(self, handle: int, tokens: list[int] | None) -> None:
        """Append tokens the engine committed to the request's answer (other requests draft from it at once)."""
        if tokens:
            self._cache.add_active_response(handle, tokens)

    def close(self, handle: int) -> None:
        """The request left: its prompt tree goes, its answer stays among the earlier answers."""
        if handle in self._cache.active_requests:
            self._cache.stop_request(handle)

    def lookup(self, handle: int, text: list[int], limit: int) -> SuffixMatch:
        """What suffix decoding drafts after ``text`` (its tail is enough): at most ``limit`` tokens."""
        if limit <= 0 or not text:
            return SuffixMatch([], 0)
        d = self._cache.speculate(handle, text[-self.max_depth:], max_spec_tokens=limit,
                                  max_spec_factor=MAX_SPEC_FACTOR, min_token_prob=MIN_TOKEN_PROB)
        return SuffixMatch(list(d.token_ids), int(d.match_len), list(d.probs))
