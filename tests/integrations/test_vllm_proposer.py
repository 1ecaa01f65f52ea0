"""GooseProposer's contract with vLLM's custom_class hook, on a batch built the way vLLM's runner builds it
(token_ids_cpu rows, num_tokens_no_spec, sampled_token_ids, rows condensed when requests finish), driven by a
greedy verifier over known target streams. No vLLM needed."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from drafting.integrations.goose_chain import (ALIGNED, MEMORY, OWN_TEXT, SOURCES, SPINE, SUFFIX_TREES, TABLE, RequestChain, agreement, spine_length, table_floor,
                                               table_length)
from drafting.integrations.token_adjacency import TokenAdjacency
from drafting.integrations.vllm import CLASS_PATH, SETTINGS_ENV, GooseProposer, speculative_config
from drafting.sources import suffix_trees

MAX_LEN = 256
K = 8


class FakeBatch:
    """vLLM's persistent input batch, reduced to what a custom proposer reads. Each request follows a fixed
    target stream; a step verifies the previous drafts greedily (accepted prefix + the target's own token)."""

    def __init__(self, max_reqs: int = 8, max_len: int = MAX_LEN):
        self.token_ids_cpu = np.zeros((max_reqs, max_len), dtype=np.int32)
        self.num_tokens_no_spec = np.zeros(max_reqs, dtype=np.int32)
        self.targets: list[list[int]] = []  # per row: prompt + the whole greedy continuation
        self.prompt_len: list[int] = []
        self.drafts: list[list[int]] = []

    def add(self, target: list[int], prompt_len: int) -> int:
        row = len(self.targets)
        self.targets.append(target)
        self.prompt_len.append(prompt_len)
        self.drafts.append([])
        self.num_tokens_no_spec[row] = 0
        return row

    def remove(self, row: int) -> None:
        """A request finished: vLLM moves the last row into the hole (condense)."""
        last = len(self.targets) - 1
        if row != last:
            self.token_ids_cpu[row] = self.token_ids_cpu[last]
            self.num_tokens_no_spec[row] = self.num_tokens_no_spec[last]
            self.targets[row], self.prompt_len[row], self.drafts[row] = (
                self.targets[last], self.prompt_len[last], self.drafts[last])
        self.targets.pop()
        self.prompt_len.pop()
        self.drafts.pop()

    def step(self, prefill_chunk: int | None = None) -> list[list[int]]:
        """One engine step: the sampled_token_ids it hands the proposer."""
        sampled = []
        for row, target in enumerate(self.targets):
            n = int(self.num_tokens_no_spec[row])
            if n < self.prompt_len[row]:  # prefill, maybe chunked
                end = self.prompt_len[row] if prefill_chunk is None else min(self.prompt_len[row], n + prefill_chunk)
                self.token_ids_cpu[row, n:end] = target[n:end]
                self.num_tokens_no_spec[row] = end
                if end < self.prompt_len[row]:
                    sampled.append([])  # a partial prefill samples nothing
                    continue
                n = end
                new = [target[n]]
            else:
                draft, acc = self.drafts[row], 0
                while acc < len(draft) and n + acc < len(target) and draft[acc] == target[n + acc]:
                    acc += 1
                new = target[n : n + acc + 1]
            self.token_ids_cpu[row, n : n + len(new)] = new
            self.num_tokens_no_spec[row] = n + len(new)
            sampled.append(list(new))
        return sampled

    def run(self, proposer: GooseProposer, sampled: list[list[int]]) -> list[list[int]]:
        drafts = proposer.propose(sampled, self.num_tokens_no_spec[: len(self.targets)],
                                  self.token_ids_cpu[: len(self.targets)])
        assert len(drafts) == len(self.targets)
        self.drafts = drafts
        return drafts


def repetitive(seed: int, length: int = 200) -> list[int]:
    """A stream that repeats phrases, as code and lists do, over a vocabulary of a few hundred ids."""
    rng = random.Random(seed)
    phrases = [[rng.randrange(3, 400) for _ in range(rng.randrange(4, 12))] for _ in range(6)]
    out: list[int] = []
    while len(out) < length:
        out += rng.choice(phrases) if rng.random() < 0.8 else [rng.randrange(3, 400)]
    return out[:length]


def proposer(**kw) -> GooseProposer:
    settings = kw.get("settings")
    settings = os.environ.get(SETTINGS_ENV, "") if settings is None else settings
    if "suffix=" not in settings:  # the same drafts whether or not arctic-inference is installed
        kw["settings"] = ",".join(filter(None, ("suffix=off", settings)))
    kw.setdefault("num_speculative_tokens", K)
    kw.setdefault("max_model_len", MAX_LEN)
    kw.setdefault("table", TokenAdjacency())
    return GooseProposer(**kw)


def test_several_requests_get_one_valid_chain_each():
    p, batch = proposer(), FakeBatch()
    for seed in range(4):
        batch.add(repetitive(seed), prompt_len=60)
    drafted = accepted = 0
    for _ in range(40):
        if any(batch.num_tokens_no_spec[r] >= len(t) - 1 for r, t in enumerate(batch.targets)):
            break  # a request wrote its whole stream: it would leave the batch
        sampled = batch.step()
        for row, s in enumerate(sampled):
            # the accepted part of each previous draft reaches the proposer through sampled_token_ids
            assert s[:-1] == batch.drafts[row][: len(s) - 1]
        drafts = batch.run(p, sampled)
        for d in drafts:
            assert len(d) <= K and all(isinstance(t, int) for t in d)
        drafted += sum(map(len, drafts))
    assert p.active == 4
    s = p.stats()
    accepted = sum(s[f"{src}_accepted"] for src in SOURCES)
    assert drafted > 0 and accepted > 0
    assert accepted <= sum(s[f"{src}_drafted"] for src in SOURCES)


def test_partial_prefill_drafts_nothing_and_holds_no_state():
    p, batch = proposer(), FakeBatch()
    batch.add(repetitive(1), prompt_len=50)
    assert batch.run(p, batch.step(prefill_chunk=20)) == [[]]
    assert p.active == 0
    assert batch.run(p, batch.step(prefill_chunk=20)) == [[]]
    assert p.active == 0
    batch.run(p, batch.step(prefill_chunk=20))  # prefill completes and the first token is sampled
    assert p.active == 1
    assert len(p._rows[0]) == 51


def test_state_follows_a_request_whose_row_moves_and_finished_requests_are_freed():
    p, batch = proposer(), FakeBatch()
    for seed in range(3):
        batch.add(repetitive(10 + seed), prompt_len=40)
    for _ in range(5):
        batch.run(p, batch.step())
    moved = p._rows[2]
    batch.remove(0)  # request 0 finishes; request 2 moves into row 0
    batch.run(p, batch.step())
    assert p.active == 2
    assert p._rows[0] is moved
    assert len(moved) == int(batch.num_tokens_no_spec[0])
    batch.remove(1)
    batch.remove(0)
    assert p.propose([], np.zeros(0, dtype=np.int32), np.zeros((0, MAX_LEN), dtype=np.int32)) == []
    assert p.active == 0


def test_identical_prompts_keep_separate_states():
    p, batch = proposer(), FakeBatch()
    target = repetitive(3)
    batch.add(target, prompt_len=30)
    batch.add(target, prompt_len=30)
    for _ in range(4):
        batch.run(p, batch.step())
    assert p._rows[0] is not p._rows[1]


def test_request_at_the_length_limit_gets_no_draft():
    limit = 64
    p, batch = proposer(max_model_len=limit), FakeBatch(max_len=limit)
    batch.add([7, 8, 9] * 30, prompt_len=limit - 1)  # the first sampled token fills the context
    assert batch.run(p, batch.step()) == [[]]
    p2, batch2 = proposer(max_model_len=limit), FakeBatch(max_len=limit)
    batch2.add([7, 8, 9] * 30, prompt_len=limit - 4)  # room for the sampled token, one draft and the bonus
    (d,) = batch2.run(p2, batch2.step())
    assert 1 <= len(d) <= 2


def test_no_match_and_empty_table_propose_nothing():
    p, batch = proposer(), FakeBatch()
    batch.add(list(range(100, 180)), prompt_len=40)  # no token repeats: nothing to match or recall
    for _ in range(5):
        assert batch.run(p, batch.step()) == [[]]


def test_table_drafts_from_an_earlier_requests_stream_hot_start():
    table = TokenAdjacency()
    p, batch = proposer(table=table), FakeBatch()
    first = list(range(1000, 1040))
    batch.add(first, prompt_len=20)
    for _ in range(3):
        batch.run(p, batch.step())
    batch.remove(0)
    batch.run(p, batch.step())
    assert p.active == 0
    # a new request whose text never repeats inside itself; its first sampled token is one the first had
    batch.add([5, 6, 1010, 1011, 1012, 1013], prompt_len=2)
    (d,) = batch.run(p, batch.step())
    assert d == [1011] and p._rows[0].last_source == TABLE
    # one sighting (share 1/2) buys one token; a second would fall under the path floor of 0.3
    assert table.chain(-1, 1009, 8, min_path=0.2) == [1010, 1011]


def test_spine_length_follows_the_ema_and_confidence():
    assert spine_length(20, 1.0, True, 0.0, 8) == 8  # consensus: bypass, the whole chain
    assert spine_length(3, 0.6, True, 0.5, 8) == 3
    low = spine_length(20, 0.3, False, 0.1, 8)
    high = spine_length(20, 0.3, False, 0.9, 8)
    assert 1 <= low < high <= 8
    assert spine_length(0, 0.0, False, 0.5, 8) == 0
    assert spine_length(5, 0.5, False, 0.5, 0) == 0
    assert table_length(0.1, 8) == 1 and table_length(0.9, 8) == 4


def test_misses_lower_the_spine_ema_and_shorten_chains():
    st = RequestChain([1, 2, 3, 4, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3], TokenAdjacency())
    first = st.propose(8)
    assert first and st.last_source == SPINE
    st.advance([99])  # the engine's own token differs from the draft's first: nothing accepted
    assert st.ema[SPINE] < 0.5
    assert st.accepted[SPINE] == 0 and st.drafted[SPINE] == len(first)
    st2 = RequestChain([1, 2, 3, 4, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3], TokenAdjacency())
    d = st2.propose(8)
    assert st2.advance(d + [42]) == len(d)  # all accepted, plus the bonus token
    assert st2.ema[SPINE] > 0.5
    assert st2.tokens[-len(d) - 1 :] == d + [42]


def test_table_source_has_its_own_ema():
    table = TokenAdjacency()
    table.learn([50, 51, 52, 50, 51, 52])
    st = RequestChain([7, 50], table)
    d = st.propose(8)
    assert d and st.last_source == TABLE
    st.advance([53])
    assert st.ema[TABLE] < 0.5 and st.ema[SPINE] == 0.5
    assert table_floor(0.1, 0.3) == 0.6 and table_floor(0.5, 0.3) == 0.3
    # a mostly rejected table source drafts a transition seen once no more, one seen twice still
    seen = TokenAdjacency()
    seen.learn([60, 61, 0, 70, 71, 0, 70, 71])
    once, twice = RequestChain([1, 60], seen), RequestChain([2, 70], seen)
    once.ema[TABLE] = twice.ema[TABLE] = 0.1
    assert once.propose(8) == [] and twice.propose(8) == [71]


def test_construction_from_a_vllm_like_config_and_bad_configs():
    class Spec:
        num_speculative_tokens = 5

    class Model:
        max_model_len = 128

    class Config:
        speculative_config = Spec()
        model_config = Model()

    p = GooseProposer(Config())
    assert (p.k, p.max_model_len) == (5, 128)
    assert p.load_model(object()) is None
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        GooseProposer(num_speculative_tokens=0, max_model_len=128)
    with pytest.raises(ValueError, match="max_model_len"):
        GooseProposer(num_speculative_tokens=4)
    assert speculative_config(6) == {"method": "custom_class", "model": CLASS_PATH, "num_speculative_tokens": 6}


def test_adjacency_rows_stay_small_and_capacity_resets():
    t = TokenAdjacency(capacity=4, keep=2)
    t.learn([1, 2, 1, 3, 1, 3, 1, 4])
    assert t.best(-1, 1)[0] == 3
    assert len(t._uni[1]) <= 2
    t.learn(list(range(10, 20)))
    assert len(t) <= 4


def test_settings_from_text_and_environment(monkeypatch):
    from drafting.integrations.vllm import SETTINGS_ENV, SettingsError, parse_settings

    assert parse_settings(None)["spine"] == "goose"
    s = parse_settings("spine=full, min_path=0.2")
    assert (s["spine"], s["min_path"], s["chain"]) == ("full", 0.2, 20)
    assert parse_settings("ngram_min=3+spine=full") == {**parse_settings("spine=full"), "ngram_min": 3}
    for bad in ("spine=tree", "min_path=x", "nope=1", "spine", "ngram_min=6", "own=2", "aligned=3"):
        with pytest.raises(SettingsError):
            parse_settings(bad)
    monkeypatch.setenv(SETTINGS_ENV, "spine=full+budget=off")
    p = proposer()
    assert p.settings["spine"] == "full"
    # a full spine drafts the whole chain where GOOSE's share would draft part of it (the lengths GOOSE itself
    # chooses, before the step budget of test_batch_budget.py cuts them)
    row = np.zeros((1, MAX_LEN), dtype=np.int32)
    seq = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3]
    row[0, : len(seq)] = seq
    full = p.propose([[3]], np.array([len(seq)]), row)[0]
    part = proposer(settings="budget=off,own=0").propose([[3]], np.array([len(seq)]), row)[0]
    assert full == list(range(4, 12)) and len(part) < len(full) and full[: len(part)] == part
    # the context matches down to one token by default; ngram_min=3 (goose's own matcher) leaves the adjacency
    # table's single token
    seq2 = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 1, 2]
    row[0, : len(seq2)] = seq2
    assert proposer(settings="ngram_min=3,own=0").propose([[2]], np.array([len(seq2)]), row)[0] == [3]
    assert proposer(settings="").propose([[2]], np.array([len(seq2)]), row)[0][:3] == [3, 4, 5]


def answer_once(p: GooseProposer, target: list[int], prompt_len: int, steps: int = 60) -> list[list[int]]:
    """Run one request to the end of ``target`` alone in a batch, then let it leave; the drafts of each step."""
    batch = FakeBatch()
    batch.add(target, prompt_len=prompt_len)
    drafts = []
    for _ in range(steps):
        if int(batch.num_tokens_no_spec[0]) >= len(target) - 1:
            break
        drafts.append(batch.run(p, batch.step())[0])
    batch.remove(0)
    p.propose([], np.zeros(0, dtype=np.int32), np.zeros((0, MAX_LEN), dtype=np.int32))
    return drafts


def test_a_later_request_drafts_an_earlier_answer_from_the_memory():
    answer = list(range(500, 540))  # never repeats inside itself: the context has nothing to match
    p = proposer(settings="budget=off")
    first = answer_once(p, [1, 2, 3] + answer, prompt_len=3)
    assert not any(first[1:])
    batch = FakeBatch()
    batch.add([9, 8, 7] + answer, prompt_len=3)
    for _ in range(3):
        batch.run(p, batch.step())
    st = p._rows[0]
    assert st.last_source == MEMORY and st.last_draft == answer[len(st) - 3 : len(st) - 3 + K]
    assert p.stats()["memory_accepted"] > 0
    # another proposer never saw the answer: its memory is its own
    other = proposer(settings="budget=off")
    batch2 = FakeBatch()
    batch2.add([9, 8, 7] + answer, prompt_len=3)
    for _ in range(3):
        assert batch2.run(other, batch2.step()) == [[]]
    # and memory=0 turns the source off
    off = proposer(settings="budget=off,memory=0")
    answer_once(off, [1, 2, 3] + answer, prompt_len=3)
    batch3 = FakeBatch()
    batch3.add([9, 8, 7] + answer, prompt_len=3)
    for _ in range(3):
        batch3.run(off, batch3.step())
        assert off._rows[0].last_source != MEMORY  # the adjacency table's chain, learned from the first answer
    assert off.memory is None and off.stats()["memory_drafted"] == 0


def test_the_candidate_expected_to_get_more_accepted_is_drafted_and_every_candidate_teaches():
    # the context says 4 5 6 after 1 2 3; the earlier answer (and the truth) says 4 7 8
    truth = [1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12]
    p = proposer(settings="budget=off,spine=full,own=0")
    answer_once(p, [60, 61] + [0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13], prompt_len=2)
    batch = FakeBatch()
    batch.add(truth, prompt_len=10)  # the first sampled token ends ... 1 2 3
    (d,) = batch.run(p, batch.step())
    st = p._rows[0]
    kinds = [kind[0] for kind, _ in st.offered]
    assert kinds == [SPINE, MEMORY]
    assert d == st.offered[kinds.index(st.last_source)][1][:K]
    batch.run(p, batch.step())
    # every candidate is scored against what was committed, drafted or not: the context's chain was wrong from
    # its first token (drafted on a tie, it cost the step), the memory's right as far as one token tells
    outcomes = {kind[0]: (kind, got, tried) for kind, got, tried in st.outcomes}
    assert outcomes[SPINE][1:] == (0, 1) and outcomes[MEMORY][1:] == (1, 1)
    ctx_kind, mem_kind = outcomes[SPINE][0], outcomes[MEMORY][0]
    assert p.kind_acceptance.chances(mem_kind, 1, 0.5)[0] > p.kind_acceptance.chances(ctx_kind, 1, 0.5)[0]
    # and a request offered both drafts the one its score rates higher
    stream = [1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4]
    for prefer, expect in ((MEMORY, [7, 8, 9]), (SPINE, [5, 6, 0])):
        st2 = RequestChain(stream, TokenAdjacency(), memory=p.memory, full_spine=True, own=False)
        d = st2.propose(3, lambda kind, chain: float(kind[0] == prefer))
        assert st2.last_source == prefer and d == expect


def test_the_requests_own_text_offers_what_most_of_its_earlier_occurrences_continue_with():
    # after 5 the text went on 7 8 twice and 9 once, most recently: the context matcher follows the most recent
    # occurrence, the own text the majority, and both are offered
    stream = [5, 7, 8, 1, 5, 7, 8, 2, 5, 9, 3, 4, 5]
    st = RequestChain(stream, TokenAdjacency(), ngram_sizes=(5, 4, 3, 2, 1))
    offered = dict(st.candidates(4))
    own = next(kind for kind in offered if kind[0] == OWN_TEXT)
    assert offered[own][:2] == [7, 8] and own == (OWN_TEXT, 1, False)  # one token matched, the occurrences split
    assert offered[next(kind for kind in offered if kind[0] == SPINE)][:2] == [9, 3]
    st.advance([7, 8])  # the own text learns what is committed: it now ends 5 7 8, matched 3 tokens long
    found = st.own.lookup(4)
    assert found.match == 3 and found.support == 2 and found.chain[0] in (1, 2)
    off = RequestChain(stream, TokenAdjacency(), ngram_sizes=(5, 4, 3, 2, 1), own=False)
    assert off.own is None and all(kind[0] != OWN_TEXT for kind, _ in off.candidates(4))
    assert proposer(settings="own=0")._chain_args["own"] is False


def test_the_text_an_edit_copies_is_a_candidate_that_keeps_its_place_through_the_edit():
    file = list(range(100, 140))  # the prompt: an instruction and a file of distinct tokens
    st = RequestChain([1, 2, 3] + file + [100, 101], TokenAdjacency(), output_from=43, own=False)
    aligned = dict(st.candidates(5))[(ALIGNED, 2, 0)]  # the answer's first two tokens aligned it: run 0
    assert aligned == [102, 103, 104, 105, 106]
    st.advance([102, 103, 104, 900, 901])  # follows three more tokens, then inserts two of its own
    assert all(kind[0] != ALIGNED for kind, _ in st.candidates(5))  # off the file: no chain until it returns
    st.advance([105])  # back where it left
    assert dict(st.candidates(3))[(ALIGNED, 1, 0)] == [106, 107, 108]
    off = RequestChain([1, 2, 3] + file + [100, 101], TokenAdjacency(), output_from=43, aligned=False)
    assert off.aligned is None and all(kind[0] != ALIGNED for kind, _ in off.candidates(5))
    assert proposer(settings="aligned=0")._chain_args["aligned"] is False


def test_suffix_trees_are_a_candidate_source_where_arctic_inference_is_installed():
    if not suffix_trees.available():
        with pytest.raises(suffix_trees.SuffixTreesUnavailable, match="arctic-inference"):
            proposer(settings="suffix=on")
        assert proposer(settings="suffix=auto").suffix_trees is None
        return
    answer = list(range(500, 540))  # never repeats inside itself: only an earlier answer has it
    p = proposer(settings="budget=off,memory=0,own=0,suffix=on")
    answer_once(p, [1, 2, 3] + answer, prompt_len=3)
    assert p.suffix_trees.open_requests == 0  # the request left: its prompt tree went, its answer stays
    batch = FakeBatch()
    batch.add([9, 8, 7] + answer, prompt_len=3)
    for _ in range(4):
        batch.run(p, batch.step())
    st = p._rows[0]
    assert st.last_source == SUFFIX_TREES and st.last_draft == answer[len(st) - 3 : len(st) - 3 + len(st.last_draft)]
    assert p.stats()["suffix_accepted"] > 0
    assert proposer(settings="suffix=off").suffix_trees is None


def test_agreement_reads_what_the_committed_tokens_decide():
    assert agreement([5, 6, 7], [5, 6, 9]) == (2, 3)
    assert agreement([5, 6, 7], [5, 6]) == (2, 2)  # the third is not decided yet
    assert agreement([5], [5, 6, 7]) == (1, 1)
    assert agreement([4, 6], [5]) == (0, 1)
