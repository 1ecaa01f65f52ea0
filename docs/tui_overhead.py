"""How much the chat app costs decoding: the same prompt and speculator decoded headless (Decoder alone, on the
main thread, as `goose bench` does) and inside the running chat app, alternating which goes first, median
decode time (prefill excluded) of each.

The app runs under Textual's test pilot, but its driver is a terminal stand-in: every frame is encoded into the
escape sequences a terminal would get and written to /dev/null, so the measured cost includes that work too.

    python docs/tui_overhead.py [--speculator goose] [--tokens 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from contextlib import contextmanager

import textual.drivers.headless_driver as headless_driver

from drafting.decode import Decoder
from drafting.model import load_model
from drafting.prompting import encode
from drafting.speculators import create
from tui.chat_app import ChatApp
from tui.session import ChatSession

PROMPT = "Write a Python function that checks whether a string is a palindrome, then explain it."


class TerminalStandIn(headless_driver.HeadlessDriver):
    """Headless input, but the app encodes and writes every frame as it would for a real terminal."""

    _out = os.open(os.devnull, os.O_WRONLY)
    written = 0  # bytes, all apps together


    @property
    def is_headless(self) -> bool:
        return False

    def write(self, data: str) -> None:
        raw = data.encode()
        os.write(self._out, raw)
        TerminalStandIn.written += len(raw)


@contextmanager
def terminal_stand_in():
    plain = headless_driver.HeadlessDriver
    headless_driver.HeadlessDriver = TerminalStandIn  # what App.run_test builds its driver from
    try:
        yield
    finally:
        headless_driver.HeadlessDriver = plain


def headless(lm, spec: str, tokens: int) -> tuple[float, int, int]:
    dec = Decoder(lm, create(spec))
    ids = encode(lm.tokenizer, [{"role": "user", "content": PROMPT}])
    r = dec.generate(ids, tokens)
    return r.wall_s - r.prefill_s, len(r.output_ids), r.steps


async def in_app(lm, spec: str, tokens: int) -> tuple[float, int, int]:
    session = ChatSession(lm, spec, max_new_tokens=tokens)
    session.ar_step_s = 0.05  # the start-up baseline is not what is measured here
    app = ChatApp(session)
    with terminal_stand_in():
        async with app.run_test(size=(120, 36)) as pilot:
            app.query_one("#prompt").value = PROMPT
            await pilot.press("enter")
            while app.generating:
                await asyncio.sleep(0.25)  # the measuring loop itself stays out of the way
    r = session.decoder.result
    assert TerminalStandIn.written, "the app drew nothing"
    return r.wall_s - r.prefill_s, len(r.output_ids), r.steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--speculator", default="goose")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    lm = load_model()
    headless(lm, args.speculator, 8)  # warm-up
    plain, tui = [], []
    for i in range(args.rounds):
        runs = {}
        for which in ("headless", "app") if i % 2 == 0 else ("app", "headless"):
            runs[which] = headless(lm, args.speculator, args.tokens) if which == "headless" else \
                asyncio.run(in_app(lm, args.speculator, args.tokens))
        (s, n1, steps1), (t, n2, steps2) = runs["headless"], runs["app"]
        plain.append(s)
        tui.append(t)
        assert n1 == n2, (n1, n2)
        print(f"headless {n1 / s:6.1f} tok/s ({steps1} steps)   chat app {n2 / t:6.1f} tok/s ({steps2} steps)",
              flush=True)
    a, b = statistics.median(plain), statistics.median(tui)
    print(f"{args.speculator}, {n1} tokens, median of {args.rounds}: headless {a:.3f} s, chat app {b:.3f} s, "
          f"cost {100 * (b / a - 1):+.1f}%")


if __name__ == "__main__":
    main()
