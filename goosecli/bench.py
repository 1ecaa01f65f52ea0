"""`goose bench PROMPTS.jsonl`: speculators side by side against plain decoding, with proof of identical output."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from goosecli.app import app
from goosecli.options import (
    Engine, SPECULATORS, Device, DeviceMap, Dtype, MaxNewTokens, Model, Raw, Seed, RegistryHelp, Temperature, TopK, TopP,
    Weights, fail, load_or_fail, sampling_or_fail,
)

INTERRUPTED = 130


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


@app.command(cls=RegistryHelp)
def bench(
    prompts: Annotated[Path, typer.Argument(help="JSON Lines prompt file: {\"prompt\", \"id\"?, \"task\"?, \"turns\"?} per line.", show_default=False)],
    speculators: Annotated[
        str,
        typer.Option("--speculators", "-s", help="Comma-separated specs, e.g. 'hf-ar,pld,hf-pld' or 'pld:max_ngram=3,draft=10,goose:budget=60'; `ar` always runs as the reference; hf-ar (transformers' own generate() on the unmodified model) adds the speedup vs the faster plain decoding. Speculators: " + SPECULATORS + " (their options are listed below)."),
    ] = "ar,pld,hf-pld",
    max_new_tokens: MaxNewTokens = 128,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Run only the first N prompts (after --tasks).", min=1)] = None,
    tasks: Annotated[Optional[str], typer.Option("--tasks", help="Comma-separated task names to keep, e.g. 'gsm8k,mt_bench'.")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", "-o", help="Write results here as JSON, rewritten after every finished run.")] = None,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="Folder for one step-record trace per prompt x speculator (for `goose viz`).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the --json file of an interrupted run, skipping finished runs.")] = False,
    model: Model = None,
    device: Device = "auto",
    engine: Engine = "transformers",
    dtype: Dtype = "auto",
    weights: Weights = "auto",
    tie_margin: Annotated[
        float,
        typer.Option("--tie-margin", help="A run that differs from `ar` still counts as exact up to ties when ar's top-2 logit gap at the first divergence is at most this (bf16/int8 round tree passes differently).", min=0.0),
    ] = 0.5,
    device_map: DeviceMap = None,
    raw: Raw = False,
    temperature: Temperature = 0.0,
    top_k: TopK = 0,
    top_p: TopP = 1.0,
    seed: Seed = None,
) -> None:
    """Run speculators in turn on every prompt, check each output against `ar` and report speedups."""
    from drafting.bench.prompt_file import PromptFileError, read_prompts

    # what needs no torch is checked first: a mistyped option or a bad prompt file answers in a moment
    params = sampling_or_fail(temperature, top_k, top_p, seed)
    task_set = {t.strip() for t in tasks.split(",") if t.strip()} if tasks else None
    try:
        prompt_list = read_prompts(prompts, tasks=task_set, limit=limit)
    except PromptFileError as exc:
        fail(str(exc))
    if trace is not None and trace.exists() and not trace.is_dir():
        fail(f"--trace {str(trace)!r} is a file; give a folder for the trace files.")

    from drafting.bench.contenders import build_contenders, split_specs
    from drafting.bench.results import BenchError, ResultsFile, read_resumable
    from drafting.bench.runner import run_bench
    from drafting.bench.settings import BenchSettings
    from drafting.errors import UnsupportedModelError
    from drafting.machine.curve_watch import take_notices
    from drafting.baselines.llama_cpp import LlamaCppError
    from drafting.baselines.registry import NAMES as BASELINES
    from drafting.machine.memory import gib, peak_rss_bytes
    from drafting.machine.openmp import describe_settings
    from drafting.errors import SpecError
    from drafting.speculators import parse_spec

    from goosecli.bench_report import Report

    specs = split_specs(speculators)
    if not specs:
        fail("--speculators is empty; name at least one speculator, e.g. pld.")
    try:
        for spec in specs:
            if spec.split(":")[0].strip() not in BASELINES:
                parse_spec(spec)
    except SpecError as exc:
        fail(str(exc))
    try:
        read_resumable(json_out, resume)  # a file that cannot be resumed is refused before the model loads
    except BenchError as exc:
        fail(str(exc))
    try:
        lm = load_or_fail(model, device, dtype, device_map, weights, engine)
        contenders = build_contenders(speculators, lm, params)
    except KeyboardInterrupt:
        print("goose: interrupted before any run started.", file=sys.stderr)
        raise typer.Exit(INTERRUPTED) from None
    except (SpecError, UnsupportedModelError, LlamaCppError) as exc:
        fail(str(exc))
    meta = {
        "model": lm.name,
        "engine": lm.engine,
        "mode": lm.mode,
        "device": lm.device.type,
        "dtype": str(lm.dtype).replace("torch.", ""),
        "weights": lm.weights,
        "tie_margin": tie_margin,
        "max_new_tokens": max_new_tokens,
        "prompt_file": str(prompts),
        "raw": raw,
        "sampling": {"temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p, "seed": params.seed},
        "speculators": [c.spec for c in contenders],
        "weights_choice": lm.mode_choice.to_dict() if lm.mode_choice is not None else None,
        "openmp": describe_settings(),
    }
    try:
        results = ResultsFile(json_out, meta, resume)
    except BenchError as exc:
        fail(str(exc))
    settings = BenchSettings(max_new_tokens=max_new_tokens, raw=raw, params=params, trace_dir=trace, tie_margin=tie_margin)
    report = Report(lm.describe(), meta["speculators"], params.greedy)
    done = results.done()
    todo = sum(1 for p in prompt_list for c in contenders if (p.id, c.spec) not in done)
    report.start(len(prompt_list), todo, len(done))
    if lm.mode_choice is not None:
        report.note(lm.mode_choice.describe())
    report.note(f"OpenMP: {meta['openmp']}; {torch_threads()} threads")
    report.note(f"memory: peak RSS {gib(peak_rss_bytes())} with the model loaded")
    try:
        with report.progress(todo) as advance:
            for item in run_bench(lm, contenders, prompt_list, settings, results):
                advance(item)
    except KeyboardInterrupt:
        results.save(complete=False)  # every finished run is already in; make sure the file says so
        report.tables(results.document(complete=False))
        where = f"; {len(results.runs)} finished runs are in {str(json_out)!r}, --resume continues" if json_out else ""
        print(f"goose: interrupted{where}.", file=sys.stderr)
        raise typer.Exit(INTERRUPTED) from None
    results.failure = results.nothing_finished()
    results.save(complete=True)
    report.tables(results.document(complete=True))
    for line in take_notices():
        report.note(f"note: {line}")
    report.note(f"memory: peak RSS {gib(peak_rss_bytes())}")
    if json_out:
        report.note(f"results: {json_out}")
    if results.failure is not None:
        fail(results.failure.rstrip(".") + ".")
