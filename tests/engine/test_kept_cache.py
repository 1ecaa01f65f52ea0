"""A chat that keeps its KV cache between turns answers exactly as one that prefills the whole conversation
every turn, and prefills only what the chat template adds; the incremental detokeniser."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from drafting.chat.session import ChatSession
from drafting.models.detokenize import Detokenizer

TURNS = ["Hi!", "What is 2+2?", "Name a colour.", "Say a fruit.", "Thanks.", "Count to three.", "What is water?",
         "Say yes.", "Name a bird.", "Bye."]
TOKENS = 12


def _answer(session: ChatSession, text: str, stop_after: int | None = None) -> list[int]:
    out: list[int] = []
    steps = {"n": 0}

    def should_stop() -> bool:
        steps["n"] += 1
        return stop_after is not None and steps["n"] > stop_after

    for record, _ in session.ask(text, should_stop):
        out.extend(record.emitted)
    return out


# plain decoding takes the same kept-cache path without a speculator to resume: the heavy tier proves it
@pytest.mark.parametrize("spec", ["goose", pytest.param("ar", marks=pytest.mark.heavy)])
def test_ten_turns_with_the_kept_cache_match_full_prefill(embedded_lm, spec):
    kept = ChatSession(embedded_lm, spec, max_new_tokens=TOKENS)
    full = ChatSession(embedded_lm, spec, max_new_tokens=TOKENS, keep_cache=False)
    speculator = kept.decoder.speculator
    resumed: list[bool] = []
    own_resume = speculator.resume
    speculator.resume = lambda context: resumed.append(own_resume(context)) or resumed[-1]
    for turn, text in enumerate(TURNS, 1):
        a, b = _answer(kept, text), _answer(full, text)
        assert a == b, f"turn {turn} differs"
        assert full.prefilled == full.prompt_tokens - 1
        if turn > 1:
            # only the end of the last answer, the new user turn and the assistant header are prefilled
            assert kept.prefilled < 40 < kept.prompt_tokens, (turn, kept.prefilled, kept.prompt_tokens)
        assert kept._cache.get_seq_length() == len(kept._cached_ids)
    assert kept.messages == full.messages
    assert len(resumed) == len(TURNS) - 1 and all(resumed) == (spec == "goose")
    if spec == "goose":  # the context index caught up turn by turn is the one a reset would build
        from drafting.sources.context import SpineMatcher

        rebuilt = SpineMatcher()
        rebuilt.reset(list(speculator.matcher.tokens))
        assert speculator.matcher._index == rebuilt._index
        assert speculator.matcher.tokens[:-1] == kept._cached_ids


def test_fallbacks_new_conversation_edited_history_and_speculator_switch(embedded_lm):
    s = ChatSession(embedded_lm, "ar", max_new_tokens=TOKENS)
    _answer(s, TURNS[0])
    _answer(s, TURNS[1])
    assert s.prefilled < 40
    s.new_conversation()  # /new: nothing kept
    _answer(s, TURNS[2])
    assert s.prefilled == s.prompt_tokens - 1
    s.messages[0]["content"] = "Name a colour you like."  # edited history: only the common prefix is reused
    edited = _answer(s, TURNS[3])
    assert 0 < s.prefilled < s.prompt_tokens - 1 and s.prefilled > 20
    fresh = ChatSession(embedded_lm, "ar", max_new_tokens=TOKENS)
    fresh.messages = [dict(m) for m in s.messages[:-2]]
    assert _answer(fresh, TURNS[3]) == edited
    s.use("pld")  # reads no prefill logits: the cache carries over
    _answer(s, TURNS[4])
    assert s.prefilled < 40
    s.use("goose")  # its adjacency table has not seen this conversation's prefill: full prefill
    _answer(s, TURNS[5])
    assert s.prefilled == s.prompt_tokens - 1
    _answer(s, TURNS[6])
    assert s.prefilled < 40


def test_a_stopped_answer_leaves_a_consistent_cache(embedded_lm):
    # a fixed budget: with the default one, how much two steps emit follows the machine's measured costs, which
    # may change between the two sessions on a busy machine
    kept = ChatSession(embedded_lm, "goose:budget=60", max_new_tokens=TOKENS)
    full = ChatSession(embedded_lm, "goose:budget=60", max_new_tokens=TOKENS, keep_cache=False)
    for s in (kept, full):
        _answer(s, TURNS[0])
        _answer(s, TURNS[1], stop_after=2)  # stopped after two steps, mid-answer
    assert kept.messages == full.messages
    assert _answer(kept, TURNS[2]) == _answer(full, TURNS[2])
    assert kept.prefilled < 40


class CountingTokenizer:
    """The embedded tokenizer, recording how many ids each decode call was given."""

    def __init__(self, tok):
        self.tok = tok
        self.sizes: list[int] = []

    def decode(self, ids, **kw):
        self.sizes.append(len(ids))
        return self.tok.decode(ids, **kw)


def test_detokenizer_streams_exact_text_from_short_windows(embedded_lm):
    tok = embedded_lm.tokenizer
    text = ("Geese fly south; «les oies» volent — 雁が南へ飛ぶ 🪿🪿 naïve café. " * 6).strip()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    counting = CountingTokenizer(tok)
    d = Detokenizer(counting, skip_ids={2})
    pieces = [d.push(t) for t in ids + [2]] + [d.flush()]
    assert "".join(pieces) == d.text == tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    assert len(ids) > 100 and max(counting.sizes) <= 8  # never the whole answer


CLI_TURNS = TURNS[:4]  # the ten turns are proven in-process above; the CLI's own path needs a few


@pytest.mark.heavy  # two whole chat commands in fresh processes; the ten-turn tests above prove it in-process
def test_plain_chat_kept_and_full_prefill_give_the_same_answers():
    """The measured path: `goose chat --plain` piped, four turns, with and without --full-prefill."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "OMP_NUM_THREADS": "1",
           "GOOSE_CACHE": os.environ["GOOSE_CACHE"]}  # the session's own cache (conftest), never the user's
    runs = []
    for extra in ([], ["--full-prefill"]):
        done = subprocess.run([sys.executable, "-m", "goosecli", "chat", "--plain", "-n", "6", "-s", "goose", *extra],
                              input="\n".join(CLI_TURNS) + "\n", cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-1500:]
        runs.append(done)
    kept, full = runs
    assert kept.stdout.strip() and kept.stdout == full.stdout
    for run, small in ((kept, True), (full, False)):
        found = re.findall(r"turn (\d+) first token [0-9.]+ s \(prefilled (\d+) of (\d+) prompt tokens\)", run.stderr)
        assert [int(t) for t, _, _ in found] == list(range(1, len(CLI_TURNS) + 1))
        last, prefilled, total = (int(x) for x in found[-1])
        assert (prefilled < 40) == small and (prefilled == total - 1) == (not small)
