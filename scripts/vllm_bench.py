"""Side-by-side speculative decoding inside vLLM: no speculation, vLLM's ngram and suffix proposers and
GooseProposer, on one model and one prompt file, greedy, one request at a time.

    .venv-vllm/bin/python -m scripts.vllm_bench PROMPTS.jsonl [--model M]
        [--max-new-tokens 128] [--methods none,ngram,ngram:5,suffix,goose] [--json OUT]

Every method's output is compared token by token with the no-speculation output (identical, or the first
position where it differs); tokens/s is new tokens over generation wall time; the mean acceptance length is
1 + accepted / drafts from vLLM's own spec-decode counters.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from drafting.api import embedded_model_folder
from drafting.models.loader import EMBEDDED_NAME
from drafting.errors import ModelError
from drafting.bench.prompt_file import PromptFileError, read_prompts
from scripts import goose_reference
from scripts.goose_reference import GooseReferenceError
from drafting.integrations.vllm import SETTINGS_ENV
from scripts.vllm_runs import MethodError, method_config, unavailable

DEFAULT_METHODS = "none,ngram,ngram:5,suffix,goose"


class BenchError(ValueError):
    """Bad input or a failed run; one sentence."""


def check_model_folder(path: str) -> None:
    """vLLM picks the model class from ``architectures``; a folder without it would not load as we load it."""
    config = Path(path) / "config.json"
    if not Path(path).is_dir():
        return  # a hub id: vLLM resolves it itself
    if not config.exists():
        raise BenchError(f"Model folder {path!r} has no config.json; it is not a transformers model folder.")
    if not json.loads(config.read_text()).get("architectures"):
        raise BenchError(f"Model folder {path!r} has no \"architectures\" in its config.json, so vLLM cannot "
                         "tell which model class to build; reconvert it with this version of goose.")


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """The first position where two outputs differ (None when identical)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run_one(method: str, spec: dict, log: Path) -> list[dict]:
    """Run one method in its own process; its rows, or BenchError naming the log."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, out = Path(tmp) / "spec.json", Path(tmp) / "rows.jsonl"
        spec_path.write_text(json.dumps({**spec, "method": method, "out": str(out)}))
        env = os.environ.copy()
        env.pop(SETTINGS_ENV, None)  # plain goose means the defaults
        if method.startswith("goose:"):
            env[SETTINGS_ENV] = method.split(":", 1)[1]  # vLLM's engine processes inherit it
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"\n==== {method}\n")
            fh.flush()
            proc = subprocess.run([sys.executable, "-m", "scripts.vllm_runs", str(spec_path)],
                                  stdout=fh, stderr=subprocess.STDOUT, env=env)
        rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    if proc.returncode != 0 and len(rows) < len(spec["prompts"]):
        raise BenchError(f"vLLM failed on method {method!r} (exit {proc.returncode}); its log is {log}.")
    return rows


def summarize(runs: list[dict], methods: list[str]) -> dict:
    summary = {}
    for m in methods:
        rows = [r for r in runs if r["method"] == m]
        if not rows:
            continue
        wall = sum(r["wall_s"] for r in rows)
        drafts = sum(r["drafts"] for r in rows)
        summary[m] = {
            "tokens_per_s": sum(r["new_tokens"] for r in rows) / wall if wall > 0 else None,
            "mean_acceptance_length": 1 + sum(r["accepted"] for r in rows) / drafts if drafts else None,
            "identical": sum(1 for r in rows if r["identical"]),
            "prompts": len(rows),
            "new_tokens": sum(r["new_tokens"] for r in rows),
            "wall_s": wall,
        }
    base = summary.get("none", {}).get("tokens_per_s")
    for s in summary.values():
        s["speedup"] = s["tokens_per_s"] / base if base and s["tokens_per_s"] else None
    return summary


def render(result: dict) -> None:
    """The table on the terminal, as aligned plain text."""
    title = (f"vLLM {result['model_name']}, {result['max_new_tokens']} new tokens, greedy, "
             f"one request at a time, k={result['num_speculative_tokens']}")
    cols = ["method", "tok/s", "speedup", "mean accepted length", "identical to none", "first divergences"]
    lines = []
    for m, s in result["summary"].items():
        div = [f"{r['id']}@{r['first_divergence']}" for r in result["runs"]
               if r["method"] == m and r["first_divergence"] is not None][:3]
        lines.append([m, _fmt(s["tokens_per_s"], 1), _fmt(s["speedup"], 2, "x"),
                      _fmt(s["mean_acceptance_length"], 2), f"{s['identical']}/{s['prompts']}", ", ".join(div) or "-"])
    # plain text: drafting imports no UI library, and this table is read in logs as often as on a terminal
    widths = [max(len(str(row[i])) for row in [cols] + lines) for i in range(len(cols))]
    left = {0, len(cols) - 1}
    print(title)
    for k, row in enumerate([cols] + lines):
        print("  ".join(str(c).ljust(w) if i in left else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if k == 0:
            print("  ".join("-" * w for w in widths))
    for m, why in result["skipped"].items():
        print(f"{m}: skipped: {why}")
    ref = result.get("goose")
    if ref:
        speeds = ", ".join(f"{k} {_fmt(v['tokens_per_s'], 1)} tok/s" for k, v in ref["goose_bench"].items())
        print(f"vLLM none vs goose bench ar: {ref['identical']}/{ref['prompts']} identical; goose bench: {speeds}")
        for r in ref["none_vs_goose_ar"]:
            if r.get("length_only"):
                print(f"  {r['id']}: the same up to token {r['first_divergence']}, where one output stops "
                      "(another --max-new-tokens, or an end of sequence)")
            elif not r["identical"]:
                print(f"  {r['id']}: first divergence at token {r['first_divergence']} "
                      f"(goose ar top-2 margin there: {_fmt(r['goose_margin'], 4)})")


def _fmt(x, digits: int, unit: str = "") -> str:
    return "-" if x is None else f"{x:.{digits}f}{unit}"


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m scripts.vllm_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("prompts", help="prompt file (JSON Lines with \"prompt\" or \"turns\")")
    ap.add_argument("--model", help="model folder or hub id (default: the embedded model's converted folder)")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="new tokens per turn")
    ap.add_argument("--methods", default=DEFAULT_METHODS,
                    help="comma-separated: none, ngram (vLLM's defaults), ngram:MAX (lookup 2..MAX), "
                         "ngram:MIN-MAX, suffix, goose, goose:SETTINGS (e.g. goose:spine=full+ngram_min=2); "
                         "none is always run first")
    ap.add_argument("--num-speculative-tokens", type=int, default=8, help="vLLM's draft limit k for every method")
    ap.add_argument("--max-model-len", type=int, default=4096, help="vLLM's context length")
    ap.add_argument("--limit", type=int, help="use only the first N prompts")
    ap.add_argument("--json", dest="json_out", help="write the runs and summary to this JSON file")
    ap.add_argument("--against", metavar="GOOSE_BENCH_JSON",
                    help="a `goose bench --json` file on the same prompts: compare vLLM's none with its ar, "
                         "and show its speeds beside vLLM's")
    ap.add_argument("--log", help="file for vLLM's own log (default: a temporary file)")
    return ap.parse_args(argv)


def bench(args) -> dict:
    if args.max_new_tokens < 1 or args.num_speculative_tokens < 1:
        raise BenchError("--max-new-tokens and --num-speculative-tokens must be at least 1.")
    prompts = read_prompts(args.prompts, limit=args.limit)
    methods = ["none"] + [m for m in dict.fromkeys(x.strip() for x in args.methods.split(",")) if m and m != "none"]
    for m in methods:
        method_config(m, args.num_speculative_tokens)  # raises MethodError on a bad name
    goose_runs = goose_reference.load(args.against) if args.against else None
    if args.model:
        check_model_folder(args.model)
    if importlib.util.find_spec("vllm") is None:
        raise BenchError("vLLM is not installed in this Python; run `make vllm-setup` and use .venv-vllm/bin/python.")
    model = args.model or embedded_model_folder()
    check_model_folder(model)
    log = Path(args.log) if args.log else Path(tempfile.mkstemp(prefix="vllm-bench-", suffix=".log")[1])
    spec = {"model": model, "k": args.num_speculative_tokens, "max_new_tokens": args.max_new_tokens,
            "max_model_len": args.max_model_len, "prompts": [{"id": p.id, "turns": list(p.turns)} for p in prompts]}
    # the name goose bench gives the same model (the converted folder's own name carries a cache key)
    result = {"model": model, "model_name": Path(model).name if args.model else EMBEDDED_NAME, "max_new_tokens": args.max_new_tokens,
              "num_speculative_tokens": args.num_speculative_tokens, "log": str(log), "runs": [], "summary": {},
              "skipped": {}}
    reference: dict[str, list[int]] = {}
    try:
        for m in methods:
            why = unavailable(m)
            if why:
                result["skipped"][m] = why
                continue
            print(f"running {m} ({len(prompts)} prompts) ...", file=sys.stderr, flush=True)
            for row in run_one(m, spec, log):
                if m == "none":
                    reference[row["id"]] = row["output_ids"]
                div = first_divergence(row["output_ids"], reference.get(row["id"], []))
                row.update(identical=div is None, first_divergence=div)
                result["runs"].append(row)
            if m == "none" and goose_runs is not None:
                none_rows = [r for r in result["runs"] if r["method"] == "none"]
                result["goose"] = goose_reference.compare(none_rows, goose_runs, goose_reference.eos_ids(model))
            result["summary"] = summarize(result["runs"], methods)
            _write(args.json_out, result)  # after every method, so an interrupted run keeps what it measured
    except KeyboardInterrupt:
        result["summary"] = summarize(result["runs"], methods)
        _write(args.json_out, result)
        raise
    return result


def _write(path, result) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(str(path) + ".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(path)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        result = bench(args)
    except (BenchError, GooseReferenceError, MethodError, ModelError, PromptFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; the methods finished so far are in the JSON file", file=sys.stderr)
        return 130
    render(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
