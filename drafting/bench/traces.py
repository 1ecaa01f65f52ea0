"""The step-record trace of one bench run (one prompt x one speculator), for `goose viz`."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

from drafting.engine.loaded_model import LoadedModel
from drafting.bench.prompt_file import Prompt
from drafting.engine.trace import TraceWriter
from drafting.bench.settings import BenchSettings


def trace_path(trace_dir: Path, prompt_id: str, spec: str) -> Path:
    safe = lambda s: re.sub(r"[^A-Za-z0-9._=-]+", "_", s).strip("_") or "x"  # noqa: E731
    return trace_dir / f"{safe(prompt_id)}__{safe(spec)}.jsonl"


def write_trace(lm: LoadedModel, settings: BenchSettings, prompt: Prompt, spec: str, turns) -> None:
    """``turns``: (turn text, prompt ids, GenerationResult) per turn that ran; later turns start a new section."""
    header = {
        "model": lm.name,
        "speculator": spec,
        "prompt_id": prompt.id,
        "task": prompt.task,
        "prompt": prompt.text,
        "max_new_tokens": settings.max_new_tokens,
        "sampling": asdict(settings.params),
        "raw": settings.raw,
    }
    with TraceWriter(trace_path(settings.trace_dir, prompt.id, spec), header, tokenizer=lm.tokenizer) as tw:
        for k, (turn, ids, result) in enumerate(turns):
            if k:
                tw.section({"turn": k + 1, "prompt": turn, "prompt_tokens": len(ids)})
            for record in result.records:
                tw.write(record)
