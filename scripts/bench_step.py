"""Step 3 of the GPU check: what `goose bench -s ar,pld,goose` runs, through the bench's own runner (its forward
timer, identity and tie checks and summary), on a model the check built or was given."""

from __future__ import annotations

from pathlib import Path

import torch

from drafting.bench.contenders import build_contenders
from drafting.bench.results import ResultsFile
from drafting.bench.runner import run_bench
from drafting.bench.settings import BenchSettings
from drafting.bench.prompt_file import read_prompts
from drafting.engine.sampling_params import SamplingParams

SPECS = "ar,pld,goose"


def run_small_bench(lm, prompt_file: Path, prompts: int, tokens: int, raw: bool) -> tuple[dict, list[dict]]:
    params = SamplingParams()
    contenders = build_contenders(SPECS, lm, params)
    settings = BenchSettings(max_new_tokens=tokens, raw=raw, params=params)
    results = ResultsFile(None, {"model": lm.name, "max_new_tokens": tokens}, resume=False)
    chosen = read_prompts(prompt_file, limit=prompts)
    runs = [r for r in run_bench(lm, contenders, chosen, settings, results) if isinstance(r, dict)]
    summary = results.document(complete=True)["summary"]
    parts, ok = [], bool(runs)
    for spec, s in summary.items():
        same = s["exact_up_to_ties"] if lm.dtype != torch.float32 else s["identical"]
        ok = ok and same == s["prompts"]
        speed = f" {s['speedup']:.2f}x" if s.get("speedup") and spec != "ar" else ""
        parts.append(f"{spec} {s['tokens_per_s']:.0f} tok/s{speed} ({s['mean_accepted']:.2f}/step, "
                     f"{same}/{s['prompts']} same)")
    row = {"name": "bench", "setting": f"{lm.name}, {len(chosen)} prompts x {tokens} tokens",
           "figures": "; ".join(parts), "ok": ok, "summary": summary}
    return row, runs
