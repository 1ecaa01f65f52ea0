"""The step-record trace of one bench run (one prompt x one speculator), for `goose viz`."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from drafting.engine.loaded_model import LoadedModel
from drafting.bench.prompt_file import Prompt
from drafting.engine.trace import TraceWriter
from drafting.bench.settings import BenchSettings


# Characters of an id or a spec kept in a file name: both together, the hash and the suffix stay well inside the
# 255 bytes most file systems allow in one name (the safe characters are ASCII, one byte each).
MAX_PART = 100


def trace_stems(prompt_ids) -> dict[str, str]:
    """A distinct, valid file-name part per prompt id (ids are distinct in a prompt file): the id made safe, unless
    that is too long or another id makes the same one (``a/b`` and ``a_b``) and it is not this id itself; those get
    a hash of the id after ``~``, which no safe name holds, so no two ids share a trace file."""
    ids = list(dict.fromkeys(prompt_ids))
    safe = {pid: _safe(pid) for pid in ids}
    made = Counter(safe.values())
    return {pid: s if len(s) <= MAX_PART and (s == pid or made[s] == 1) else _hashed(pid, s) for pid, s in safe.items()}


def trace_path(trace_dir: Path, prompt_id: str, spec: str, stem: str | None = None) -> Path:
    """The trace file of one prompt x speculator; ``stem`` is the prompt's part from ``trace_stems`` over every
    prompt of the run (alone, an id cannot know which other ids its safe name would clash with)."""
    spec_part = _safe(spec)
    if len(spec_part) > MAX_PART:
        spec_part = _hashed(spec, spec_part)
    return trace_dir / f"{stem or trace_stems([prompt_id])[prompt_id]}__{spec_part}.jsonl"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text).strip("_") or "x"


def _hashed(text: str, safe: str) -> str:
    return f"{safe[:MAX_PART]}~{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


def write_trace(lm: LoadedModel, settings: BenchSettings, prompt: Prompt, spec: str, turns,
                stem: str | None = None) -> None:
    """``turns``: (turn text, prompt ids, GenerationResult) per turn that ran; later turns start a new section;
    ``stem``: the prompt's file-name part from ``trace_stems``."""
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
    with TraceWriter(trace_path(settings.trace_dir, prompt.id, spec, stem), header, tokenizer=lm.tokenizer) as tw:
        for k, (turn, ids, result) in enumerate(turns):
            if k:
                tw.section({"turn": k + 1, "prompt": turn, "prompt_tokens": len(ids)})
            for record in result.records:
                tw.write(record)
