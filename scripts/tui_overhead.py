"""How much the chat app costs decoding: the same prompt and speculator decoded headless (Decoder alone) on the
main thread as `goose bench` does, headless on a worker thread as the app decodes, and inside the running chat
app; the order rotates every round; median decode time (prefill excluded) of each. The app's cost is reported
against both headless runs: against the first it is what the issue asks (chat versus bench), against the second
it is the drawing alone.

The app runs under Textual's test pilot, but its driver is a terminal stand-in: every frame is encoded into the
escape sequences a terminal would get and written to /dev/null, so the measured cost includes that work too.

    python scripts/tui_overhead.py [--speculator goose] [--tokens 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
from contextlib import contextmanager

import textual.drivers.headless_driver as headless_driver

from drafting.engine.decode import Decoder
from drafting.machine.step_hooks import machine_hooks
from drafting.models.loader import load_model
from drafting.machine.openmp import release_idle_workers
from drafting.models.chat_template import encode
from drafting.speculators import create
from tui.chat_app import ChatApp
from drafting.chat.session import ChatSession

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
    dec = Decoder(lm, create(spec), hooks=machine_hooks())  # as the chat session decodes
    ids = encode(lm.tokenizer, [{"role": "user", "content": PROMPT}])
    r = dec.generate(ids, tokens)
    return r.wall_s - r.prefill_s, len(r.output_ids), r.steps


def headless_thread(lm, spec: str, tokens: int) -> tuple[float, int, int]:
    out = []
    release_idle_workers()  # as the app does before it decodes
    worker = threading.Thread(target=lambda: out.append(headless(lm, spec, tokens)))
    worker.start()
    worker.join()
    return out[0]


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
    r = session.last_result
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
    ways = {
        "headless": lambda: headless(lm, args.speculator, args.tokens),
        "headless, worker thread": lambda: headless_thread(lm, args.speculator, args.tokens),
        "chat app": lambda: asyncio.run(in_app(lm, args.speculator, args.tokens)),
    }
    names = list(ways)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(args.rounds):
        runs = {}
        for name in names[i % 3:] + names[: i % 3]:
            runs[name] = ways[name]()
            times[name].append(runs[name][0])
        tokens = {n for _, n, _ in runs.values()}
        assert len(tokens) == 1, runs
        print("   ".join(f"{name} {runs[name][1] / runs[name][0]:5.1f} tok/s ({runs[name][2]} steps)" for name in names),
              flush=True)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"{args.speculator}, {tokens.pop()} tokens, median of {args.rounds}: "
          + ", ".join(f"{name} {m:.3f} s" for name, m in med.items()))
    app = med["chat app"]
    print(f"chat app cost: {100 * (app / med['headless'] - 1):+.1f}% versus headless (as goose bench), "
          f"{100 * (app / med['headless, worker thread'] - 1):+.1f}% versus headless on a worker thread")


if __name__ == "__main__":
    main()
