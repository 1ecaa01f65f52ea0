"""Make the README's screenshots with the apps themselves (Textual's own SVG export).

    python scripts/screenshots.py --speculator goose TRACE [TRACE]

The chat screenshot runs one real answer on the embedded model; the viz one opens the given traces at the step
with the largest tree.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from drafting.models.loader import load_model
from drafting.engine.trace import read_trace
from tui.chat_app import ChatApp
from drafting.chat.session import ChatSession
from tui.viz_app import Opened, VizApp

DOCS = Path(__file__).resolve().parent.parent / "docs"
PROMPT = "Rewrite this so it uses a list comprehension: result = []\nfor x in range(10):\n    if x % 2 == 0:\n        result.append(x * x)"


async def chat_shot(spec: str, size) -> None:
    lm = load_model()
    session = ChatSession(lm, spec, max_new_tokens=96)
    app = ChatApp(session)
    async with app.run_test(size=size) as pilot:
        while app.query_one("#prompt").disabled:  # the start-up ar measurement
            await pilot.pause(0.1)
        app.query_one("#prompt").value = PROMPT.replace("\n", " ")
        await pilot.press("enter")
        while app.generating:
            await pilot.pause(0.1)
        await pilot.pause(0.3)
        app.save_screenshot("chat.svg", path=str(DOCS))


async def viz_shot(paths: list[Path], size) -> None:
    app = VizApp([Opened(p.name, read_trace(p)) for p in paths])
    async with app.run_test(size=size) as pilot:
        def score(i):  # a step where the spine tree gained several tokens and PTD had draft rows at that position
            section, rec = app.steps[i]
            other = app._aligned(app.ptd, section, rec.position) if app.ptd and app.ptd is not app.driver else None
            return (len(rec.emitted) > 2) + (other is not None and bool(other.rows)), len(rec.tokens)

        app.index = max(range(len(app.steps)), key=score)
        app.show_step()
        await pilot.pause(0.2)
        app.save_screenshot("viz.svg", path=str(DOCS))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--speculator", default="pld")
    ap.add_argument("--width", type=int, default=120)
    ap.add_argument("--height", type=int, default=34)
    args = ap.parse_args()
    size = (args.width, args.height)
    asyncio.run(chat_shot(args.speculator, size))
    if args.traces:
        asyncio.run(viz_shot(args.traces, size))


if __name__ == "__main__":
    main()
