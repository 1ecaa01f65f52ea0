"""GooseProposer's bounds (no vLLM needed): drafts never leave the model's vocabulary, however the process-wide
table was filled; a very repetitive context does not make each proposal walk every occurrence; the adjacency
tables stay within their stated size."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest

from drafting.integrations import goose_chain, vllm
from drafting.integrations.goose_chain import RequestChain
from drafting.integrations.token_adjacency import TokenAdjacency
from drafting.integrations.vllm import GooseProposer
from drafting.sources.context import ContextIndex

K = 8


def config(vocab: int | None, max_len: int = 100_000):
    class Spec:
        num_speculative_tokens = K

    class Model:
        max_model_len = max_len

        def get_vocab_size(self):  # vLLM's ModelConfig
            return vocab

    class Config:
        speculative_config = Spec()
        model_config = Model()

    return Config()


@pytest.fixture
def fresh_tables(monkeypatch):
    """The process-wide tables as a new process has them."""
    monkeypatch.setattr(vllm, "_SHARED_TABLE", None, raising=False)
    monkeypatch.setattr(vllm, "_SHARED_TABLES", {}, raising=False)


def one_step(p: GooseProposer, stream: list[int]) -> list[int]:
    row = np.array([stream], dtype=np.int64)
    return p.propose([[stream[-1]]], np.array([len(stream)]), row)[0]


def test_a_table_filled_by_a_bigger_model_proposes_nothing_outside_a_smaller_ones_vocabulary(fresh_tables):
    big = GooseProposer(config(50_000))
    one_step(big, [3, 700, 900, 3, 700, 900, 3, 700, 900, 5])  # the big model's stream: 3 -> 700 -> 900
    small = GooseProposer(config(100))
    draft = one_step(small, [10, 11, 3])  # no context match: the adjacency table is asked about 3
    assert all(0 <= t < 100 for t in draft), draft


def test_drafts_stop_before_the_first_id_outside_the_vocabulary():
    table = TokenAdjacency()  # one table handed to two models on purpose
    table.learn([3, 40, 700, 41, 3, 40, 700, 41])
    p = GooseProposer(num_speculative_tokens=K, max_model_len=1000, table=table, vocab_size=100)
    assert one_step(p, [10, 11, 3]) == [40]  # 3 -> 40 -> 700: the chain stops before 700
    assert GooseProposer(num_speculative_tokens=K, max_model_len=1000, table=table).vocab_size is None


def test_shared_tables_are_one_per_vocabulary_and_bounded(fresh_tables):
    assert GooseProposer(config(100)).table is GooseProposer(config(100)).table
    assert GooseProposer(config(100)).table is not GooseProposer(config(200)).table
    for vocab in range(300, 300 + 3 * vllm.MAX_SHARED_TABLES):
        GooseProposer(config(vocab))
    assert len(vllm._SHARED_TABLES) == vllm.MAX_SHARED_TABLES


def lines_run(fn) -> int:
    """Python lines executed by ``fn()``: the work a call does, counted, not timed."""
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


@pytest.mark.parametrize("unit", [[7], [7, 8]], ids=["token", "bigram"])
def test_a_proposal_costs_the_same_however_often_the_context_repeats(unit):
    def work(repeats: int) -> int:
        state = RequestChain(unit * repeats, TokenAdjacency(), ngram_sizes=(5, 4, 3, 2))
        draft = []
        n = lines_run(lambda: draft.extend(state.propose(K)))
        assert draft == (unit * K)[:K][: len(draft)] and draft  # still drafts the repetition
        return n

    few, many = work(2_000), work(40_000)
    assert many <= few * 1.1, (few, many)


def test_lookups_report_the_most_recent_occurrences_up_to_the_bound():
    rng = random.Random(0)
    tokens = [rng.randrange(4) for _ in range(3000)]
    full, capped = ContextIndex((3, 2)), ContextIndex((3, 2), max_occurrences=16)
    full.reset(tokens)
    capped.reset(tokens)
    for end in [rng.randrange(len(tokens)) for _ in range(200)] + [None]:
        for n in (3, 2):
            e = len(tokens) - 1 if end is None else end
            every = [h for h in full._index[n].get(tuple(tokens[e - n + 1 : e + 1]), []) if h < e] if e + 1 >= n else []
            assert full.occurrences(n, end) == every  # unbounded: exactly as before
            assert capped.occurrences(n, end) == every[-16:]


def repetitive_streams(count: int = 4, length: int = 240) -> list[list[int]]:
    """Streams that repeat phrases, as code and lists do: every n-gram occurs far fewer than 256 times."""
    out = []
    for seed in range(count):
        rng = random.Random(seed)
        phrases = [[rng.randrange(3, 400) for _ in range(rng.randrange(4, 12))] for _ in range(6)]
        s: list[int] = []
        while len(s) < length:
            s += rng.choice(phrases) if rng.random() < 0.8 else [rng.randrange(3, 400)]
        out.append(s[:length])
    return out


def test_drafts_are_unchanged_where_the_bound_is_not_hit(monkeypatch):
    def drafts(max_occurrences):
        monkeypatch.setattr(goose_chain, "MAX_OCCURRENCES", max_occurrences, raising=False)
        out = []
        for stream in repetitive_streams():
            state = RequestChain(stream[:50], TokenAdjacency(), ngram_sizes=(5, 4, 3, 2))
            for t in stream[50:]:
                out.append(state.propose(K))
                state.advance([t])
        return out

    assert drafts(None) == drafts(goose_chain.MAX_OCCURRENCES if hasattr(goose_chain, "MAX_OCCURRENCES") else None)


def test_the_adjacency_table_stays_within_its_stated_size():
    t = TokenAdjacency(capacity=64, keep=3)
    rng = random.Random(1)
    for _ in range(50):
        t.learn([rng.randrange(500) for _ in range(200)])
        assert len(t._uni) <= 64 and len(t._bi) <= 64
        assert all(len(row) <= 3 for tier in (t._uni, t._bi) for row in tier.values())
        assert t.entries() <= t.max_entries == 2 * 64 * 3


def test_the_stated_bounds_are_the_code_s():
    from pathlib import Path

    from drafting.integrations.token_adjacency import CAPACITY, KEEP

    doc = (Path(__file__).resolve().parents[2] / "docs" / "vllm.md").read_text()
    assert CAPACITY == 2**20 and KEEP == 4 and TokenAdjacency().max_entries == 2 * 2**20 * 4
    assert "at most 2**20 contexts" in doc and "its 4 most frequent successors" in doc
    assert f"at most the {goose_chain.MAX_OCCURRENCES} most recent earlier occurrences" in doc
    assert f"a process keeps at most {vllm.MAX_SHARED_TABLES} tables" in doc
