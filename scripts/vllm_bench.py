"""Side-by-side speculative decoding inside vLLM: no speculation, vLLM's ngram and suffix proposers and
GooseProposer, on one model and one prompt file, greedy, one request at a time or several in flight.

    .venv-vllm/bin/python -m scripts.vllm_bench PROMPTS.jsonl [--model M] [--concurrency 1,4,16]
        [--max-new-tokens 128] [--methods none,ngram,ngram:5,suffix,goose] [--json OUT]

Every method's output is compared token by token with the no-speculation output at the lowest concurrency
(identical, or the first position where it differs); tokens/s is the new tokens of the whole load over its wall
time; the mean acceptance length is 1 + accepted / drafts from vLLM's own spec-decode counters.
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
from drafting.bench.identity import first_divergence
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


def parse_concurrency(text: str) -> list[int]:
    """``1,4,16`` -> [1, 4, 16] (in the order given, each once)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise BenchError(f"--concurrency {text!r} is not a comma-separated list of whole numbers of at least 1.")
    return list(dict.fromkeys(values))


def run_one(method: str, spec: dict, log: Path) -> tuple[list[dict], dict]:
    """Run one method at one concurrency in its own process; its rows and its load record (wall time and
    spec-decode counters of the whole run), or BenchError naming the log."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, out = Path(tmp) / "spec.json", Path(tmp) / "rows.jsonl"
        spec_path.write_text(json.dumps({**spec, "method": method, "out": str(out)}))
        env = os.environ.copy()
        env.pop(SETTINGS_ENV, None)  # plain goose means the defaults
        # vLLM's engine core in the run's own process: as a process of its own it busy-waits on a core the model's
        # threads and the run's loop then share (docs/vllm.md, "Side-by-side benchmark")
        env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if method.startswith("goose:"):
            env[SETTINGS_ENV] = method.split(":", 1)[1]  # vLLM's engine processes inherit it
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"\n==== {method} concurrency {spec['concurrency']}\n")
            fh.flush()
            proc = subprocess.run([sys.executable, "-m", "scripts.vllm_runs", str(spec_path)],
                                  stdout=fh, stderr=subprocess.STDOUT, env=env)
        lines = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    rows = [x for x in lines if "load" not in x]
    loads = [x["load"] for x in lines if "load" in x]
    if proc.returncode != 0 or not loads or len(rows) < len(spec["prompts"]):
        raise BenchError(f"vLLM failed on method {method!r} at concurrency {spec['concurrency']} "
                         f"(exit {proc.returncode}); its log is {log}.")
    return rows, loads[0]


def compare_with_reference(runs: list[dict]) -> None:
    """Mark every row identical or not (and where it first differs) against ``none`` at the lowest concurrency
    run so far: one request at a time once concurrency 1 has run, whatever order the concurrencies ran in."""
    plain = [r for r in runs if r["method"] == "none"]
    if not plain:
        return
    low = min(r.get("concurrency", 1) for r in plain)
    reference = {r["id"]: r["output_ids"] for r in plain if r.get("concurrency", 1) == low}
    for row in runs:
        div = first_divergence(row["output_ids"], reference.get(row["id"], []))
        row.update(identical=div is None, first_divergence=div, reference_concurrency=low)


def summarize(runs: list[dict], loads: list[dict], methods: list[str]) -> dict:
    """Per method: the figures of each concurrency under ``by_concurrency`` (tokens/s of the whole load, mean
    time per output token, mean acceptance length, outputs identical to the reference), and those of
    concurrency 1 (else the lowest run) at the top, as one request at a time was reported before."""
    summary = {}
    for m in methods:
        by_c = {}
        for load in (x for x in loads if x["method"] == m):
            c = load["concurrency"]
            rows = [r for r in runs if r["method"] == m and r.get("concurrency", 1) == c]
            tpots = [t for r in rows for t in r.get("tpot_s", [])]
            drafts = load["drafts"]
            by_c[str(c)] = {
                "tokens_per_s": load["new_tokens"] / load["wall_s"] if load["wall_s"] > 0 else None,
                "mean_tpot_s": sum(tpots) / len(tpots) if tpots else None,
                "mean_acceptance_length": 1 + load["accepted"] / drafts if drafts else None,
                "identical": sum(1 for r in rows if r["identical"]),
                "prompts": len(rows),
                "new_tokens": load["new_tokens"],
                "wall_s": load["wall_s"],
            }
        if by_c:
            by_c = dict(sorted(by_c.items(), key=lambda kv: int(kv[0])))
            summary[m] = {**by_c.get("1", next(iter(by_c.values()))), "by_concurrency": by_c}
    for m, s in summary.items():
        for c, figures in s["by_concurrency"].items():
            base = summary.get("none", {}).get("by_concurrency", {}).get(c, {}).get("tokens_per_s")
            figures["speedup"] = figures["tokens_per_s"] / base if base and figures["tokens_per_s"] else None
        s["speedup"] = s["by_concurrency"].get("1", next(iter(s["by_concurrency"].values())))["speedup"]
    return summary


def render(result: dict) -> None:
    """One table per concurrency on the terminal, as aligned plain text."""
    concurrencies = result.get("concurrency", [1])
    for c in concurrencies:
        load = "one request at a time" if c == 1 else f"{c} conversations in flight"
        title = (f"vLLM {result['model_name']}, {result['max_new_tokens']} new tokens, greedy, {load}, "
                 f"k={result['num_speculative_tokens']}")
        cols = ["method", "tok/s", "speedup", "ms/token", "mean accepted length", "identical to none",
                "first divergences"]
        lines = []
        for m, s in result["summary"].items():
            f = s["by_concurrency"].get(str(c))
            if f is None:
                continue
            div = [f"{r['id']}@{r['first_divergence']}" for r in result["runs"]
                   if r["method"] == m and r.get("concurrency", 1) == c and r["first_divergence"] is not None][:3]
            tpot = None if f["mean_tpot_s"] is None else 1000 * f["mean_tpot_s"]
            lines.append([m, _fmt(f["tokens_per_s"], 1), _fmt(f["speedup"], 2, "x"), _fmt(tpot, 1),
                          _fmt(f["mean_acceptance_length"], 2), f"{f['identical']}/{f['prompts']}",
                          ", ".join(div) or "-"])
        # plain text: drafting imports no UI library, and this table is read in logs as often as on a terminal
        widths = [max(len(str(row[i])) for row in [cols] + lines) for i in range(len(cols))]
        left = {0, len(cols) - 1}
        print(title)
        for k, row in enumerate([cols] + lines):
            print("  ".join(str(x).ljust(w) if i in left else str(x).rjust(w)
                            for i, (x, w) in enumerate(zip(row, widths))))
            if k == 0:
                print("  ".join("-" * w for w in widths))
        print()
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
    ap.add_argument("--concurrency", default="1",
                    help="comma-separated conversations in flight, e.g. 1,4,16: each method runs once per value, in "
                         "a fresh engine, a new turn or prompt submitted as soon as one finishes (default 1)")
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
    concurrency = parse_concurrency(args.concurrency)
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
            "max_model_len": args.max_model_len, "concurrency": 1,
            "prompts": [{"id": p.id, "turns": list(p.turns)} for p in prompts]}
    # the name goose bench gives the same model (the converted folder's own name carries a cache key)
    result = {"model": model, "model_name": Path(model).name if args.model else EMBEDDED_NAME, "max_new_tokens": args.max_new_tokens,
              "num_speculative_tokens": args.num_speculative_tokens, "concurrency": concurrency, "log": str(log),
              "runs": [], "loads": [], "summary": {}, "skipped": {}}
    try:
        for c in concurrency:
            for m in methods:
                why = unavailable(m)
                if why:
                    result["skipped"][m] = why
                    continue
                print(f"running {m} at concurrency {c} ({len(prompts)} prompts) ...", file=sys.stderr, flush=True)
                rows, load = run_one(m, {**spec, "concurrency": c}, log)
                result["runs"] += rows
                result["loads"].append(load)
                compare_with_reference(result["runs"])
                if m == "none" and c == min(concurrency) and goose_runs is not None:
                    none_rows = [r for r in result["runs"] if r["method"] == "none" and r["concurrency"] == c]
                    result["goose"] = goose_reference.compare(none_rows, goose_runs, goose_reference.eos_ids(model))
                result["summary"] = summarize(result["runs"], result["loads"], methods)
                _write(args.json_out, result)  # after every run, so an interrupted bench keeps what it measured
    except KeyboardInterrupt:
        result["summary"] = summarize(result["runs"], result["loads"], methods)
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
