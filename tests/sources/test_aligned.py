"""The aligned source: a pointer into the text an answer copies, kept through insertions, deletions and
replacements."""

import pytest

from drafting.sources.aligned import HELD, RETURN, AlignedText

# a "file" of distinct tokens 100..159 after a short instruction 1..5
FILE = list(range(100, 160))
PROMPT = [1, 2, 3, 4, 5] + FILE


def follow(text: AlignedText, tokens) -> None:
    for t in tokens:
        text.extend([t])


def test_the_answer_is_aligned_once_it_starts_copying_and_the_chain_is_the_rest_of_the_file():
    text = AlignedText(PROMPT)
    assert not text.lookup(8).chain  # nothing to follow before the answer starts
    follow(text, [100])
    assert not text.aligned  # one token is no evidence before any alignment
    follow(text, [101])
    found = text.lookup(8)
    assert found.state == HELD and found.chain == list(range(102, 110))
    follow(text, range(102, 130))
    chain = text.lookup(100).chain  # as long as asked, however long the match
    assert chain == list(range(130, 160)) + list(range(100, 130))  # and on into what the answer wrote itself


def test_after_an_insertion_the_way_back_is_offered_and_taken_on_the_first_returning_token():
    text = AlignedText(PROMPT)
    follow(text, range(100, 110))
    follow(text, [900, 901, 902])  # inserted: not in the file
    assert not text.aligned
    back = text.lookup(4)
    assert back.state == RETURN and back.chain == [110, 111, 112, 113]
    follow(text, [110])  # the answer comes back where it left
    assert text.aligned and text.lookup(3).chain == [111, 112, 113]
    assert text.departures == 1 and text.returns == 1


def test_a_deletion_is_skipped_forward():
    text = AlignedText(PROMPT)
    follow(text, range(100, 110))
    follow(text, [125])  # 110..124 deleted
    assert text.lookup(3).chain == [126, 127, 128]


def test_a_replaced_stretch_realigns_on_the_first_token_after_it():
    text = AlignedText(PROMPT)
    follow(text, range(100, 110))
    follow(text, [700, 701, 114])  # 110..113 replaced by 700 701
    assert text.lookup(2).chain == [115, 116]


def test_a_single_common_token_far_from_the_anchor_does_not_move_the_pointer():
    ref = [1, 2, 3] + list(range(100, 200)) + [50] + list(range(300, 310))
    text = AlignedText(ref, step=16)
    follow(text, range(100, 110))
    follow(text, [999, 50])  # 50 is 90 tokens ahead: too far for a one-token key
    assert not text.aligned
    follow(text, [300])  # [50, 300] is a two-token key within reach
    assert text.lookup(2).chain == [301, 302]


def test_a_backward_match_is_taken_when_the_answer_repeats_earlier_text():
    text = AlignedText(PROMPT)
    follow(text, range(100, 130))
    follow(text, [105, 106, 107])  # the answer repeats a stretch from before the pointer
    assert text.lookup(2).chain == [108, 109]


def test_the_latest_occurrence_is_the_first_alignment():
    ref = [7, 8, 9, 10] + [50, 51, 52] + [7, 8, 60, 61]
    text = AlignedText(ref)
    follow(text, [7, 8])
    assert text.lookup(2).chain == [60, 61]


def test_the_answer_own_text_is_followed_too():
    text = AlignedText([1, 2, 3])
    follow(text, [40, 41, 42, 43, 44, 45, 40, 41, 42])  # the answer repeats its own opening
    assert text.lookup(5).chain == [43, 44, 45, 40, 41]


def test_a_chain_never_runs_past_what_was_written_and_bad_settings_are_refused():
    text = AlignedText([1, 2, 3, 4])
    follow(text, [2, 3, 4])
    assert text.lookup(10).chain == [2, 3, 4]  # from the answer's own start: all there is
    with pytest.raises(ValueError, match="at least 1"):
        AlignedText(PROMPT, near=0)
