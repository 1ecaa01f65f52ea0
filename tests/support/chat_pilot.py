"""Driving `goose chat`'s app from a pilot test: ask a question, wait for its answer to finish."""

from __future__ import annotations

import time


async def ask(app, pilot, text):
    app.query_one("#prompt").value = text
    await pilot.press("enter")


async def wait_answer(app, pilot, limit=300.0):
    # wall time, generous: an answer may start by measuring the cost curve again (drafting.machine.curve_watch),
    # which on a loaded 2-core machine takes longer than the answer itself
    deadline = time.monotonic() + limit
    while app.generating and time.monotonic() < deadline:
        await pilot.pause(0.1)
    assert not app.generating, f"the answer was still running after {limit:.0f} s"
    await pilot.pause(0.2)


async def wait_tokens(app, pilot, tokens, limit=300.0):
    """Until the running answer has ``tokens`` tokens (by the wall clock, for the same reason as ``wait_answer``)."""
    deadline = time.monotonic() + limit
    while app.stats.tokens < tokens and app.generating and time.monotonic() < deadline:
        await pilot.pause(0.05)
    assert app.stats.tokens >= tokens, f"the answer had {app.stats.tokens} tokens after {limit:.0f} s, not {tokens}"
