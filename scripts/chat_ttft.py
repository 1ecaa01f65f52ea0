"""Time to first token of each turn of a 10-turn `goose chat --plain` conversation (piped stdin), with the KV
cache kept between turns and with the whole conversation prefilled every turn (`--full-prefill`), one run after
the other; checks that both runs gave identical answers. Run on an idle machine:

    python scripts/chat_ttft.py                      # embedded model, goose, 64 tokens per answer
    python scripts/chat_ttft.py -s ar -n 96 -- --model PATH
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TURNS = [
    "Tell me about geese in three sentences.",
    "Why do they fly in a V shape?",
    "How far can they fly in one day?",
    "What do they eat in winter?",
    "Write a short poem about a goose.",
    "Now make it rhyme.",
    "Summarise our conversation so far.",
    "Which of your answers was the most surprising?",
    "Give me one more fact about geese.",
    "Thank you, goodbye.",
]
SUMMARY = re.compile(r"turn (\d+) first token ([0-9.]+) s \(prefilled (\d+) of (\d+) prompt tokens\)")


def run(spec: str, tokens: int, extra: list[str], full: bool) -> tuple[str, list[tuple[int, float, int, int]]]:
    cmd = [sys.executable, "-m", "goosecli", "chat", "--plain", "-s", spec, "-n", str(tokens), *extra]
    if full:
        cmd.append("--full-prefill")
    done = subprocess.run(cmd, input="\n".join(TURNS) + "\n", cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"chat_ttft: `{' '.join(cmd)}` failed: {done.stderr.strip().splitlines()[-1:]}")
    rows = [(int(t), float(s), int(p), int(n)) for t, s, p, n in SUMMARY.findall(done.stderr)]
    return done.stdout, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-s", "--speculator", default="goose", help="speculator spec for both runs")
    ap.add_argument("-n", "--max-new-tokens", type=int, default=64, help="most new tokens per answer")
    ap.add_argument("extra", nargs="*", help="more `goose chat` options, after --")
    args = ap.parse_args()
    kept_out, kept = run(args.speculator, args.max_new_tokens, args.extra, full=False)
    full_out, full = run(args.speculator, args.max_new_tokens, args.extra, full=True)
    print(f"{'turn':>4}  {'kept: first token':>17}  {'prefilled':>12}  {'full: first token':>17}  {'prefilled':>12}")
    for (t, ks, kp, kn), (_, fs, fp, fn) in zip(kept, full):
        print(f"{t:>4}  {ks:>15.3f} s  {kp:>5} of {kn:<4}  {fs:>15.3f} s  {fp:>5} of {fn:<4}")
    if len(kept) == len(full) == len(TURNS):
        print(f"turn {len(TURNS)}: kept cache / full re-prefill = {kept[-1][1] / full[-1][1]:.2f}x")
    print(f"answers identical: {kept_out == full_out}")


if __name__ == "__main__":
    main()
