"""The memory of earlier outputs: longest-suffix matches, frequency-weighted continuations, bounds."""

import random

import pytest

from drafting.sources.output_memory import MAX_MATCH, OutputMemory, TextMemory


def test_the_continuation_most_earlier_outputs_agree_on_is_proposed():
    mem = OutputMemory()
    for tail in ([7, 8, 9], [7, 8, 9], [7, 5, 6]):
        mem.add([1, 2, 3, 4] + tail)
    found = mem.lookup([40, 1, 2, 3, 4], limit=5)
    assert found.chain == [7, 8, 9]
    assert found.match == 4 and found.support == 3
    assert found.shares == pytest.approx([1.0, 2 / 3, 2 / 3])
    assert not mem.lookup([40, 1, 2, 3, 4], limit=2).chain[2:]


def test_the_longest_matching_suffix_wins_over_more_frequent_shorter_ones():
    mem = OutputMemory()
    for _ in range(5):
        mem.add([9, 3, 4, 5, 6, 100])  # ... 3 4 5 6 is followed by 100 five times
    mem.add([1, 2, 3, 4, 5, 6, 200])  # but only here does 1 2 3 4 5 6 occur
    found = mem.lookup([1, 2, 3, 4, 5, 6], limit=3)
    assert found.chain == [200] and found.match == 6 and found.support == 1
    found = mem.lookup([8, 3, 4, 5, 6], limit=3)
    assert found.chain[0] == 100 and found.match == 4


def test_a_path_below_the_minimum_share_is_not_drafted():
    mem = OutputMemory(min_share=0.5)
    for nxt in (11, 12, 13):
        mem.add([1, 2, 3, 4, nxt])
    assert mem.lookup([1, 2, 3, 4], limit=4).chain == []
    mem.add([1, 2, 3, 4, 11])
    assert mem.lookup([1, 2, 3, 4], limit=4).chain == [11]


def test_a_bigram_match_serves_where_no_four_gram_occurred():
    mem = OutputMemory()
    mem.add([5, 6, 7])
    found = mem.lookup([1, 2, 5, 6], limit=4)
    assert found.chain == [7] and found.match == 2


def test_an_output_is_visible_while_written_but_not_to_itself():
    mem = OutputMemory()
    seq = mem.open()
    mem.extend(seq, [1, 2, 3, 4, 5, 1, 2, 3, 4])
    assert mem.lookup([1, 2, 3, 4], limit=3, exclude=seq).chain == []
    assert mem.lookup([1, 2, 3, 4], limit=3).chain == [5, 1, 2]


def test_matches_are_measured_up_to_max_match_tokens():
    mem = OutputMemory()
    text = list(range(100, 140))
    mem.add(text + [7])
    found = mem.lookup(text, limit=1)
    assert found.chain == [7] and found.match == MAX_MATCH


def test_memory_stays_bounded_and_forgets_the_oldest_outputs_first():
    mem = OutputMemory(max_tokens=50)
    first = mem.add([1, 2, 3, 4, 99] + [0] * 20)
    assert mem.lookup([1, 2, 3, 4], limit=1).chain == [99]
    for i in range(20):
        mem.add([1000 + i] * 10)
    assert len(mem) <= 50
    assert mem.lookup([1, 2, 3, 4], limit=1).chain == []
    mem.extend(first, [1, 2, 3])  # a forgotten output takes no more
    assert len(mem) <= 50
    assert mem.lookup([1017] * 4, limit=2).chain == [1017, 1017]


def test_lookups_agree_with_a_brute_force_reading_of_the_outputs():
    rng = random.Random(3)
    outputs = [[rng.randrange(6) for _ in range(rng.randrange(5, 60))] for _ in range(30)]
    mem = OutputMemory(max_occurrences=10 ** 6, min_share=1e-9)
    for out in outputs:
        mem.add(out)
    for _ in range(200):
        text = [rng.randrange(6) for _ in range(rng.randrange(2, 30))]
        found = mem.lookup(text, limit=1)
        best, follow = 0, []
        for out in outputs:
            for end in range(len(out) - 1):
                agree = 0
                while agree < min(MAX_MATCH, end + 1, len(text)) and out[end - agree] == text[-agree - 1]:
                    agree += 1
                if agree >= 2 and agree > best:
                    best, follow = agree, [out[end + 1]]
                elif agree >= 2 and agree == best:
                    follow.append(out[end + 1])
        if best == 0:
            assert found.chain == []
            continue
        assert found.match == best and found.support == len(follow)
        top = max(follow.count(t) for t in set(follow))
        assert follow.count(found.chain[0]) == top


def test_bad_bounds_are_refused_in_one_sentence():
    with pytest.raises(ValueError, match="OutputMemory needs"):
        OutputMemory(max_tokens=0)


def test_a_text_read_as_its_own_memory_matches_down_to_one_token():
    text = TextMemory()
    text.extend([5, 7, 8, 3, 5])
    found = text.lookup(4)  # only the lone 5 occurred before (the text's own end is skipped)
    assert found.chain == [7, 8, 3, 5] and found.match == 1 and found.support == 1
    text.extend([7])
    assert text.text == [5, 7, 8, 3, 5, 7]
    assert text.lookup(2).chain == [8, 3] and text.lookup(2).match == 2
    bigrams = TextMemory((4, 2))
    bigrams.extend([5, 7, 8, 3, 5])
    assert bigrams.lookup(4).chain == []  # "3 5" never occurred before, and no single tokens
    with pytest.raises(ValueError):
        OutputMemory(key_sizes=(0,))
