"""The bench's results file: every finished run and skipped prompt, saved as it happens, and resumed from."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from drafting.bench.contenders import REFERENCE
from drafting.bench.summary import summarize
from drafting.machine.memory import peak_rss_bytes

# Settings that change what a run measures: a resumed file must have been run with the same ones.
RESUME_MUST_MATCH = ("model", "max_new_tokens", "sampling", "raw", "prompt_file", "dtype", "weights")


class BenchError(ValueError):
    """A benchmark cannot start or resume; one sentence."""


@dataclass
class Skip:
    prompt_id: str
    task: str
    reason: str


def read_resumable(path: Path | None, resume: bool) -> dict | None:
    """What ``--resume`` continues: None when not resuming or the file is not there yet; BenchError (one
    sentence) before any model is loaded when it cannot be resumed at all."""
    if not resume:
        return None
    if path is None:
        raise BenchError("--resume needs --json OUT (the results file to continue).")
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise BenchError(f"Cannot resume: {str(path)!r} is not a goose bench JSON file.")
    return data


class ResultsFile:
    """The --json output, rewritten whole (write-then-rename) after every run, so it is always valid JSON."""

    def __init__(self, path: Path | None, meta: dict, resume: bool):
        self.path = path
        self.meta = meta
        self.runs: list[dict] = []
        self.skipped: list[dict] = []
        self.failure: str | None = None  # why a run that finished nothing failed (the command exits non-zero)
        data = read_resumable(path, resume)
        if data is not None:
            self._load(data)

    def _load(self, data: dict) -> None:
        for key in RESUME_MUST_MATCH:
            if key in data and data[key] != self.meta.get(key):
                raise BenchError(
                    f"Cannot resume {str(self.path)!r}: it was run with {key} = {data[key]!r}, this run has "
                    f"{self.meta.get(key)!r}."
                )
        self.runs = data["runs"]

    def done(self) -> set[tuple[str, str]]:
        return {(r["prompt_id"], r["speculator"]) for r in self.runs}

    def reference(self, prompt_id: str) -> list[int] | None:
        for r in self.runs:
            if r["prompt_id"] == prompt_id and r["speculator"] == REFERENCE:
                return r["output_ids"]
        return None

    def reference_margins(self, prompt_id: str) -> list[float] | None:
        for r in self.runs:
            if r["prompt_id"] == prompt_id and r["speculator"] == REFERENCE:
                return r.get("margins")
        return None

    def add(self, run: dict) -> None:
        self.runs.append(run)
        self.save()

    def skip(self, skip: Skip) -> None:
        self.skipped.append(asdict(skip))
        self.save()

    def document(self, complete: bool) -> dict:
        greedy = self.meta.get("sampling", {}).get("temperature", 0) <= 0
        doc = {**self.meta, "complete": complete, "peak_rss_bytes": peak_rss_bytes(), "runs": self.runs,
               "skipped": self.skipped, "summary": summarize(self.runs, greedy)}
        if self.failure is not None:
            doc["failure"] = self.failure
        return doc

    def nothing_finished(self) -> str | None:
        """One sentence when no prompt produced a run (every one skipped, or none given); None otherwise."""
        if self.runs:
            return None
        why = f"; the first: {self.skipped[0]['reason']}" if self.skipped else ""
        n = len(self.skipped)
        return f"No run finished: {n} prompt{'s were' if n != 1 else ' was'} skipped{why}"

    def save(self, complete: bool = False) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.document(complete), indent=1), encoding="utf-8")
        os.replace(tmp, self.path)
