"""Step 3 of the GPU check: what `goose bench -s ar,pld,goose` runs, through the bench's own runner (its forward
timer, timing and summary), on a model the check built or was given. Whether each run's output is `ar`'s is
judged as every identity row judges it (gpu_checks.judge), not by the bench's own tie margin."""

from __future__ import annotations

from pathlib import Path

import torch

from drafting.bench.contenders import build_contenders
from drafting.bench.prompt_file import read_prompts
from drafting.bench.results import ResultsFile
from drafting.bench.runner import run_bench
from drafting.bench.settings import BenchSettings
from drafting.engine.sampling_params import SamplingParams
from drafting.models.chat_template import encode
from gpu_checks import identity_figures, identity_verdict, reference

SPECS = ("ar", "pld", "goose")


def run_small_bench(lm, prompt_file: Path, prompts: int, tokens: int, raw: bool) -> tuple[dict, list[dict]]:
    params = SamplingParams()
    contenders = build_contenders(",".join(SPECS), lm, params)
    settings = BenchSettings(max_new_tokens=tokens, raw=raw, params=params)
    results = ResultsFile(None, {"model": lm.name, "max_new_tokens": tokens}, resume=False)
    # single-turn prompts: each run's output then follows its prompt's tokens, which the fresh pass re-reads
    chosen = [p for p in read_prompts(prompt_file) if len(p.turns) == 1][:prompts]
    runs = [r for r in run_bench(lm, contenders, chosen, settings, results) if isinstance(r, dict)]
    prompt_ids = {p.id: encode(lm.tokenizer, [{"role": "user", "content": p.text}], raw=raw) for p in chosen}
    summary = results.document(complete=True)["summary"]
    row = bench_row(lm, prompt_ids, runs, summary)
    row["setting"] = f"{lm.name}, {len(chosen)} prompts x {tokens} tokens"
    return row, runs


def bench_row(lm, prompt_ids: dict[str, list[int]], runs: list[dict], summary: dict) -> dict:
    """The row from the bench's runs: speeds from its summary; ok when every prompt ran with every speculator
    and ``identity_verdict`` finds no output that differs from `ar`'s beyond a tie."""
    out = {(r["prompt_id"], r["speculator"]): r["output_ids"] for r in runs}
    complete = bool(prompt_ids) and all((p, s) in out for p in prompt_ids for s in SPECS)
    refs = {p: reference(lm, ids, out[(p, "ar")]) for p, ids in prompt_ids.items() if (p, "ar") in out}
    pairs = {s: [(refs[p], out[(p, s)]) for p in refs if (p, s) in out] for s in SPECS if s != "ar"}
    v = identity_verdict(pairs, lm.dtype, exact=lm.dtype == torch.float32)
    speeds = []
    for spec, s in summary.items():
        speed = f" {s['speedup']:.2f}x" if s.get("speedup") and spec != "ar" else ""
        speeds.append(f"{spec} {s['tokens_per_s']:.0f} tok/s{speed} ({s['mean_accepted']:.2f}/step)")
    figures = "; ".join(speeds) + "; vs ar: " + identity_figures(v)
    if not complete:
        figures += f"; ONLY {len(out)} OF {len(prompt_ids) * len(SPECS)} RUNS CAME BACK"
    return {"name": "bench", "setting": "", "figures": figures, "ok": complete and v["ok"], "summary": summary,
            **{k: v[k] for k in ("speculators", "reference_tokens", "beyond_tie", "reference_unexplained")}}
