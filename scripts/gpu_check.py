"""One check of goose on a GPU (or, with --cpu, of this script itself on a tiny model), without network:

1. tree-vs-sequential logits and greedy identity with every speculator, in float32 and bfloat16;
2. `goose doctor`'s measurements on a random model of Llama-3-8B's shape (bf16, built on the GPU);
3. `goose bench -s ar,pld,goose` on a small model (a random one of SmolLM2-135M's shape, or --model);
4. the static-shapes option (preallocated cache, bucketed tree sizes, compiled step) against eager decoding.

Each row is ok, failed or skipped (asked to with --skip, or out of time); a row is ok only by a test that can
fail. Prints one summary table and a last line that says "all checks passed" only when every row ran and
passed; exits 1 when any row failed. Writes the JSON to --json, or to $OUT/gpu_check.json when $OUT is set, and
the same table as markdown beside it (gpu_check.md, for docs/gpu.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import gpu_checks  # noqa: E402
from gpu_models import byte_tokenizer, parameter_count, random_llama  # noqa: E402

SPECULATORS = ["pld", "tr", "iso", "goose", "lookahead", "ptd"]
SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
STATIC_DEADLINE_S = 240  # the static step (compiles a few CUDA graphs) starts only before this much time is used
STEP_ROWS = {"correctness": ("tree logits", "greedy identity"), "doctor": ("doctor",), "bench": ("bench", "timing"),
             "static": ("static shapes",)}


def plan(cpu: bool) -> dict:
    """Sizes of every step: the GPU plan fits 8 minutes on one GPU, the CPU plan well under a minute."""
    if cpu:
        return dict(device="cpu", check_shape="tiny", trees=2, max_nodes=24, prompts=2, tokens=24,
                    doctor_shape="tiny", doctor_prefix=64, bench_shape="tiny", bench_prompts=2, bench_tokens=16,
                    static_tokens=16)
    return dict(device="cuda", check_shape="check", trees=4, max_nodes=64, prompts=4, tokens=64,
                doctor_shape="llama3-8b", doctor_prefix=1024, bench_shape="smollm2-135m", bench_prompts=6,
                bench_tokens=128, static_tokens=64)


def run_step(label: str, fn, results: list[dict]) -> None:
    """Run one check; a failure to run is a failed row with its one-line reason, and the script goes on."""
    t0 = time.perf_counter()
    try:
        out = fn()
    except Exception as exc:  # the table must still come out, with what went wrong
        traceback.print_exc(file=sys.stderr)  # the whole story for whoever reads the log
        first = (str(exc).strip().splitlines() or [""])[0]
        where = traceback.extract_tb(exc.__traceback__)[-1]
        text = f"{type(exc).__name__}: {first} ({Path(where.filename).name}:{where.lineno})"
        out = [{"name": label, "setting": "", "figures": text[:200], "ok": False}]
    for row in out if isinstance(out, list) else [out]:
        row["ok"] = row["ok"] is True  # only a check's own True passes
        row["status"] = "ok" if row["ok"] else "failed"
        row["seconds"] = time.perf_counter() - t0
        results.append(row)
        print(f"  {'ok ' if row['ok'] else 'BAD'} {row['name']:<16} {row['setting']}", file=sys.stderr, flush=True)


def skipped(step: str, why: str) -> list[dict]:
    """The rows of a step that did not run: neither ok nor failed."""
    return [{"name": name, "setting": "", "figures": f"skipped: {why}", "ok": False, "status": "skipped",
             "seconds": 0.0} for name in STEP_ROWS[step]]


def correctness(p: dict, device: torch.device) -> list[dict]:
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        lm = random_llama(p["check_shape"], device, dtype)
        rows.append(gpu_checks.tree_logits(lm, p["trees"], p["max_nodes"]))
        prompts = gpu_checks.repetitive_prompts(lm.vocab_size, p["prompts"])
        rows.append(gpu_checks.greedy_identity(lm, SPECULATORS, prompts, p["tokens"]))
        del lm
    return rows


def doctor(p: dict, device: torch.device) -> dict:
    lm = random_llama(p["doctor_shape"], device, torch.bfloat16)
    try:
        row = gpu_checks.doctor(lm, SIZES, p["doctor_prefix"])
        row["setting"] += f", {parameter_count(lm)} parameters"
        return row
    finally:
        del lm
        _free(device)


def bench_model(p: dict, device: torch.device, model: str | None, dtype: torch.dtype):
    if model is None:
        return random_llama(p["bench_shape"], device, dtype, tokenizer=byte_tokenizer()), True
    from drafting.models.loader import load_model

    return load_model(model, device=str(device), dtype=str(dtype).replace("torch.", "")), False


def bench(p: dict, device: torch.device, model: str | None) -> list[dict]:
    from bench_step import run_small_bench

    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    lm, raw = bench_model(p, device, model, dtype)
    try:
        row, runs = run_small_bench(lm, ROOT / "examples" / "prompts.jsonl", p["bench_prompts"], p["bench_tokens"], raw)
        return [row, gpu_checks.timing_sanity(runs, gpu_checks.timer_overhead(lm))]
    finally:
        del lm
        _free(device)


def static(p: dict, device: torch.device) -> dict:
    from static_step import static_identity

    # float32 on every device: compiled kernels keep in float32 what eager bfloat16 rounds after every op, so in
    # bf16 their logits differ from the dynamic path's by up to 20 bf16 steps (measured with inductor on CPU),
    # past any tie margin that still leaves decisive tokens; in float32 a difference is a real one.
    lm = random_llama(p["bench_shape"], device, torch.float32)
    try:
        prompts = gpu_checks.repetitive_prompts(lm.vocab_size, 3, seed=1)  # the first warms up
        return static_identity(lm, ["ar", "goose"], prompts, p["static_tokens"], compile=device.type == "cuda")
    finally:
        del lm
        _free(device)


def _free(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


HEAD = ("check", "setting", "result", "status", "step s")
SHOWN = {"ok": "ok", "failed": "FAIL", "skipped": "skipped"}


def _cells(rows: list[dict]) -> list[tuple[str, ...]]:
    return [(r["name"], r["setting"], r["figures"], SHOWN[r["status"]], f"{r['seconds']:.0f}") for r in rows]


def table(rows: list[dict]) -> str:
    body = _cells(rows)
    widths = [max(len(x[i]) for x in [HEAD, *body]) for i in range(len(HEAD))]
    line = lambda cells: " | ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(HEAD), "-+-".join("-" * w for w in widths), *map(line, body)])


def markdown(rows: list[dict], title: str) -> str:
    cell = lambda c: c.replace("|", "\\|")  # noqa: E731  ("max |diff|" must not split a cell)
    lines = [title, "", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(map(cell, cells)) + " |" for cells in _cells(rows)]
    return "\n".join(lines) + "\n"


def counts(rows: list[dict]) -> dict:
    return {k: sum(r["status"] == k for r in rows) for k in ("ok", "failed", "skipped")}


def summary(rows: list[dict]) -> str:
    """The last line: "all checks passed" only when every row ran and passed."""
    n = counts(rows)
    if n["failed"]:
        return f"SOME CHECKS FAILED: {n['ok']} passed, {n['failed']} failed, {n['skipped']} skipped"
    if n["skipped"] or not rows:
        return f"{n['ok']} passed, {n['skipped']} skipped: not all checks ran"
    return f"all checks passed ({n['ok']})"


def save(dest: Path | None, doc: dict) -> None:
    if dest is None:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, dest)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="run every step on CPU with tiny models (tests the script)")
    ap.add_argument("--model", help="bench this model (folder, .gguf or hub id) instead of a random one")
    ap.add_argument("--json", type=Path, help="write the results here (default: $OUT/gpu_check.json if $OUT is set)")
    ap.add_argument("--skip", default="", help="comma-separated steps to leave out: correctness,doctor,bench,static")
    args = ap.parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        print(f"gpu_check: torch {torch.__version__} in {sys.executable} sees no CUDA GPU; run with --cpu to check "
              "the script itself.", file=sys.stderr)
        return 2
    p = plan(args.cpu)
    device = torch.device(p["device"])
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    steps = [("correctness", lambda: correctness(p, device)), ("doctor", lambda: doctor(p, device)),
             ("bench", lambda: bench(p, device, args.model)), ("static", lambda: static(p, device))]
    unknown = skip - {name for name, _ in steps}
    if unknown:
        print(f"gpu_check: unknown step(s) in --skip: {', '.join(sorted(unknown))}.", file=sys.stderr)
        return 2
    env = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "cuda": torch.version.cuda, "threads": torch.get_num_threads()}
    dest = args.json or (Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else None)
    rows: list[dict] = []
    t0 = time.perf_counter()
    for name, fn in steps:
        if name in skip:
            rows += skipped(name, "--skip")
        elif name == "static" and time.perf_counter() - t0 > STATIC_DEADLINE_S:
            # compiling takes minutes: keep the whole check inside its 8 minutes
            rows += skipped(name, f"the earlier steps took over {STATIC_DEADLINE_S} s")
        else:
            run_step(name, fn, rows)
        save(dest, {**env, "cpu_mode": args.cpu, "complete": False, "checks": rows})  # a killed run keeps these
    last = summary(rows)
    title = f"goose gpu check on {env['device']} (torch {env['torch']}), {time.perf_counter() - t0:.0f} s: {last}"
    print(title)
    print(table(rows))
    print(last)
    if dest is not None:
        n = counts(rows)
        save(dest, {**env, "cpu_mode": args.cpu, "complete": True, "summary": last, "passed": n["ok"],
                    "failed": n["failed"], "skipped": n["skipped"], "all_passed": n["ok"] == len(rows) > 0,
                    "checks": rows})
        md = dest.with_suffix(".md")
        md.write_text(markdown(rows, title))
        print(f"results written to {dest} and {md}")
    return 1 if counts(rows)["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
