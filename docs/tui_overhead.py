"""How much the chat app costs decoding: the same prompt and speculator decoded headless (Decoder alone) and
inside the running chat app (headless Textual, drawing as usual), alternating, median decode time of each.

    python docs/tui_overhead.py [--speculator pld] [--tokens 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from drafting.decode import Decoder
from drafting.model import load_model
from drafting.prompting import encode
from drafting.speculators import create
from tui.chat_app import ChatApp
from tui.session import ChatSession

PROMPT = "Write a Python function that checks whether a string is a palindrome, then explain it."


def headless(lm, spec: str, tokens: int) -> tuple[float, int]:
    dec = Decoder(lm, create(spec))
    ids = encode(lm.tokenizer, [{"role": "user", "content": PROMPT}])
    r = dec.generate(ids, tokens)
    return r.wall_s - r.prefill_s, len(r.output_ids)


async def in_app(lm, spec: str, tokens: int) -> tuple[float, int]:
    session = ChatSession(lm, spec, max_new_tokens=tokens)
    session.ar_step_s = 0.05  # the start-up baseline is not what is measured here
    app = ChatApp(session)
    async with app.run_test(size=(120, 36)) as pilot:
        app.query_one("#prompt").value = PROMPT
        await pilot.press("enter")
        while app.generating:
            await asyncio.sleep(0.25)  # the measuring loop itself stays out of the way
    r = session.decoder.result
    return r.wall_s - r.prefill_s, len(r.output_ids)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--speculator", default="pld")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    lm = load_model()
    headless(lm, args.speculator, 8)  # warm-up
    plain, tui = [], []
    for _ in range(args.rounds):
        s, n1 = headless(lm, args.speculator, args.tokens)
        plain.append(s)
        t, n2 = asyncio.run(in_app(lm, args.speculator, args.tokens))
        tui.append(t)
        assert n1 == n2, (n1, n2)
        print(f"headless {n1 / s:6.1f} tok/s   chat app {n2 / t:6.1f} tok/s", flush=True)
    a, b = statistics.median(plain), statistics.median(tui)
    print(f"{args.speculator}, {n1} tokens, median of {args.rounds}: headless {a:.3f} s, chat app {b:.3f} s, "
          f"cost {100 * (b / a - 1):+.1f}%")


if __name__ == "__main__":
    main()
