"""A chat session keeps its cache straight: layers left at different lengths are cropped alike, a new question
asked while an answer is still streamed ends that answer before touching the cache, and a turn that fails before
its answer leaves the history as it was."""

from __future__ import annotations

import pytest
import torch

from drafting.chat.session import ChatSession

TOKENS = 12
FIRST, SECOND = "Name three birds.", "Which of them swims best?"


def _answer(session: ChatSession, text: str) -> list[int]:
    return [t for record, _ in session.ask(text) for t in record.emitted]


def _fresh_answer(lm, messages: list[dict], text: str) -> list[int]:
    """What a new session answers after the same history (it prefills the whole conversation)."""
    fresh = ChatSession(lm, "ar", max_new_tokens=TOKENS)
    fresh.messages = [dict(m) for m in messages]
    return _answer(fresh, text)


# a step interrupted midway: the first layers wrote its rows, the rest did not; a crop interrupted midway: the
# first layers were cropped, the rest still hold the rows
@pytest.mark.parametrize("longer", ["first half", "second half"])
def test_layers_of_different_lengths_are_cropped_alike(embedded_lm, longer):
    session = ChatSession(embedded_lm, "ar", max_new_tokens=TOKENS)
    _answer(session, FIRST)
    layers = session._cache.layers
    held = layers[0].keys.shape[2]
    half = len(layers) // 2
    with torch.inference_mode():  # as the cache was written
        for layer in layers[:half] if longer == "first half" else layers[half:]:
            k, v = layer.keys, layer.values
            layer.update(torch.randn_like(k[:, :, :3]), torch.randn_like(v[:, :, :3]))
    assert {layers[0].keys.shape[2], layers[-1].keys.shape[2]} == {held, held + 3}
    history = [dict(m) for m in session.messages]
    assert _answer(session, SECOND) == _fresh_answer(embedded_lm, history, SECOND)
    assert session.prefilled < session.prompt_tokens - 1  # the kept cache was still used
    assert len({layer.keys.shape[2] for layer in layers}) == 1


def test_a_new_question_ends_the_answer_still_being_streamed(embedded_lm):
    session = ChatSession(embedded_lm, "ar", max_new_tokens=TOKENS)
    first = session.ask(FIRST)
    partial = [t for _ in range(2) for t in next(first)[0].emitted]
    second = _answer(session, SECOND)
    assert list(first) == []  # ended by the new question: it never decodes into the cache the new one holds
    assert [m["role"] for m in session.messages] == ["user", "assistant", "user", "assistant"]
    whole = _fresh_answer(embedded_lm, [], FIRST)
    assert whole[: len(partial)] == partial and len(partial) < len(whole)
    assert second == _fresh_answer(embedded_lm, session.messages[:2], SECOND)


def test_a_turn_that_fails_before_its_answer_leaves_the_history_as_it_was(embedded_lm):
    session = ChatSession(embedded_lm, "ar", max_new_tokens=TOKENS)
    _answer(session, FIRST)
    before = [dict(m) for m in session.messages]
    forward = session.decoder.forward
    step = forward.step

    def fails_once(*args, **kwargs):
        forward.step = step
        raise RuntimeError("the device went away")

    forward.step = fails_once
    with pytest.raises(RuntimeError, match="device went away"):
        _answer(session, SECOND)
    assert session.messages == before
    assert _answer(session, SECOND) == _fresh_answer(embedded_lm, before, SECOND)
    assert [m["role"] for m in session.messages] == ["user", "assistant", "user", "assistant"]
