"""Measure OpenMP wait settings alone and beside a twin process (goose itself sets none: see docs/speed.md).

Each candidate setting runs in fresh processes (the OpenMP runtime reads its variables once, at load): first one
worker alone, then two identical workers at once. A worker loads the model, warms up, waits until every worker
of its round is ready, then decodes a fixed prompt for ``--seconds`` and reports its tokens per second. The table
gives, per setting, the alone speed (and its ratio to the fastest alone setting) and each twin's speed as a
share of its own alone speed: the default should lose at most 5% alone and keep at least 0.4x beside a twin.

Run it on an otherwise idle machine, from the repository root:

    .venv/bin/python scripts/omp_policy.py                      # every candidate, 15 s per round
    .venv/bin/python scripts/omp_policy.py --seconds 10 --speculator goose --json omp.json

The OpenMP variables of the calling shell are not passed on (each candidate names its own).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_NUM_THREADS", "GOOSE_OPENMP")
CANDIDATES = {
    "runtime default": {"GOOSE_OPENMP": "keep"},
    "goose default": {},  # goose as shipped: the runtime's defaults and thread sharing
    "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "spin 1000": {"GOMP_SPINCOUNT": "1000"},
    "spin 10000": {"GOMP_SPINCOUNT": "10000"},
    "spin 100000": {"GOMP_SPINCOUNT": "100000"},
    "1 thread": {"OMP_NUM_THREADS": "1", "GOOSE_OPENMP": "keep"},
}
PROMPT = "Write a Python function that checks whether a number is prime, then explain it in two sentences."


def worker(args) -> None:
    """One measuring process: load, warm up, say ready, wait for go, decode for a fixed time, print JSON."""
    import torch

    from drafting.engine.decode import Decoder
    from drafting.machine.step_hooks import machine_hooks
    from drafting.models.loader import load_model
    from drafting.models.chat_template import encode
    from drafting.speculators import create

    lm = load_model(args.model, device="cpu", dtype=args.dtype, weights=args.weights)
    ids = encode(lm.tokenizer, [{"role": "user", "content": PROMPT}])
    dec = Decoder(lm, create(args.speculator), hooks=machine_hooks())
    dec.generate(ids, 8)
    print("ready", flush=True)
    sys.stdin.readline()
    tokens, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        tokens += len(dec.generate(ids, args.tokens).output_ids)
    wall = time.perf_counter() - t0
    print(json.dumps({"tokens": tokens, "seconds": wall, "threads": torch.get_num_threads()}), flush=True)


def run_round(env_extra: dict, copies: int, args) -> list[float]:
    """Start ``copies`` workers with the setting, release them together, return each one's tokens/s."""
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    env.update(env_extra)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, __file__, "--worker", "--seconds", str(args.seconds), "--tokens", str(args.tokens),
           "--speculator", args.speculator, "--dtype", args.dtype, "--weights", args.weights]
    if args.model:
        cmd += ["--model", args.model]
    procs = [subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(copies)]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a worker failed before it was ready (see its error above)")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        rates = []
        for p in procs:
            out, _ = p.communicate(timeout=args.seconds * copies * 4 + 120)
            doc = json.loads(out.strip().splitlines()[-1])
            rates.append(doc["tokens"] / doc["seconds"])
        return rates
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=15.0, help="Decoding time of each worker per round (default 15).")
    ap.add_argument("--tokens", type=int, default=64, help="New tokens per generation (default 64).")
    ap.add_argument("--speculator", default="ar", help="What each worker decodes with (default ar; e.g. goose).")
    ap.add_argument("--model", default=None, help="Model (default: the embedded one).")
    ap.add_argument("--dtype", default="float32", help="Model dtype (default float32).")
    ap.add_argument("--weights", default="float", help="Weight format (default float, so no mode probe runs).")
    ap.add_argument("--only", default=None, help="Comma-separated candidate names to run (default: all): "
                    + ", ".join(CANDIDATES) + ".")
    ap.add_argument("--json", default=None, help="Also write the figures to this file.")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    names = [n.strip() for n in args.only.split(",")] if args.only else list(CANDIDATES)
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        sys.exit(f"Unknown candidate {unknown[0]!r}; choose from: {', '.join(CANDIDATES)}.")
    rows = []
    for name in names:
        alone = run_round(CANDIDATES[name], 1, args)[0]
        twins = run_round(CANDIDATES[name], 2, args)
        rows.append({"setting": name, "env": CANDIDATES[name], "alone_tok_s": alone, "twin_tok_s": twins})
        print(f"  {name}: alone {alone:.1f} tok/s, twins {', '.join(f'{t:.1f}' for t in twins)}", file=sys.stderr)
    best = max(r["alone_tok_s"] for r in rows)
    print(f"\n{'setting':<16} {'alone tok/s':>11} {'vs best':>8} {'twin tok/s (each)':>20} {'twin/alone':>11}")
    for r in rows:
        share = min(r["twin_tok_s"]) / r["alone_tok_s"]
        twins = " / ".join(f"{t:.1f}" for t in r["twin_tok_s"])
        ok = "ok" if r["alone_tok_s"] >= 0.95 * best and share >= 0.4 else ""
        print(f"{r['setting']:<16} {r['alone_tok_s']:>11.1f} {r['alone_tok_s'] / best:>7.2f}x {twins:>20} {share:>10.2f}x {ok}")
        r["twin_share"] = share
    print("\nok = within 5% of the fastest alone and >= 0.4x of its alone speed beside a twin.")
    if args.json:
        Path(args.json).write_text(json.dumps({"speculator": args.speculator, "seconds": args.seconds, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
