"""Per-step records shared by bench, chat and viz, and the JSONL trace files that hold them.

A trace file is JSON Lines: a header object (``{"goose_trace": VERSION, ...}``) and then one step record per
line, written as each step finishes so that an interrupted run leaves a readable prefix.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

TRACE_VERSION = 1


class TraceError(Exception):
    """A trace file is missing, empty, truncated or from another version; the message is one sentence."""


@dataclass
class StepRecord:
    step: int  # 0-based step number within one generation
    position: int  # output tokens already emitted before this step
    tokens: list[int]  # tree node tokens, node 0 = root (last committed token)
    parents: list[int]  # parent index per node, -1 for the root
    sources: list[str]  # source tag per node (see drafting.engine.tree)
    accepted: list[int]  # accepted node indices, root first
    emitted: list[int]  # tokens this step added to the output (accepted nodes after the root + bonus)
    draft_s: float  # time spent by the speculator (propose + observe)
    verify_s: float  # forward pass + acceptance + cache upkeep
    rows: dict | None = None  # in-model draft rows (PTD / Lookahead): speculator-defined, drawn by viz
    info: dict = field(default_factory=dict)  # speculator facts: route, budget, confidence, EMA, ...
    top: list | None = None  # per node: [[token, prob], ...] of the target's top tokens, when recorded
    stop: str | None = None  # why generation ended after this step (eos, max_new_tokens, context)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "StepRecord":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def record_token_ids(record: StepRecord) -> set[int]:
    """Every token id a record mentions (tree, output, top-k, in-model rows)."""
    ids = set(record.tokens) | set(record.emitted)
    for node in record.top or []:
        ids.update(t for t, _ in node)
    if record.rows:
        rows = record.rows
        ids.update(t for t in rows.get("tokens", []) if isinstance(t, int))
        ids.update(t for t in rows.get("next") or [] if isinstance(t, int))  # each row's argmax
        ids.update(g[1] for g in rows.get("grown") or [] if isinstance(g, (list, tuple)) and len(g) == 2)
    return ids


class TraceWriter:
    """Appends records to a trace file, flushing each line.

    With a tokenizer, each record line carries ``token_text`` for the ids it is first to mention, so a viewer
    shows text without loading the model.
    """

    def __init__(self, path: str | Path, header: dict, tokenizer=None):
        self.tokenizer = tokenizer
        self._known: set[int] = set()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w", encoding="utf-8")
        self._f.write(json.dumps({"goose_trace": TRACE_VERSION, **header}) + "\n")
        self._f.flush()

    def section(self, header: dict) -> None:
        """Start a new generation (e.g. the next chat turn) inside the same file."""
        self._f.write(json.dumps({"goose_section": header}) + "\n")
        self._f.flush()

    def write(self, record: StepRecord) -> None:
        line = record.to_dict()
        if self.tokenizer is not None:
            new = sorted(record_token_ids(record) - self._known)
            self._known.update(new)
            line["token_text"] = {str(t): self.tokenizer.decode([t]) for t in new}
        self._f.write(json.dumps(line) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@dataclass
class Trace:
    header: dict
    sections: list[dict]  # each: {"header": {...}, "records": [StepRecord, ...]}
    token_text: dict[int, str] = field(default_factory=dict)

    def text(self, token: int) -> str:
        return self.token_text.get(token, f"<{token}>")

    @property
    def records(self) -> list[StepRecord]:
        return [r for s in self.sections for r in s["records"]]


def read_trace(path: str | Path) -> Trace:
    """Read a trace; a missing, empty, foreign or broken file raises TraceError with one clear sentence."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"Trace file {str(p)!r} does not exist.")
    if p.is_dir():
        raise TraceError(f"{str(p)!r} is a folder; give one trace file from it.")
    lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
    if not lines or not lines[0].strip():
        raise TraceError(f"Trace file {str(p)!r} is empty.")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        raise TraceError(f"{str(p)!r} is not a goose trace (its first line is not JSON).") from None
    if not isinstance(header, dict) or "goose_trace" not in header:
        raise TraceError(f"{str(p)!r} is not a goose trace (no goose_trace header).")
    if header["goose_trace"] != TRACE_VERSION:
        raise TraceError(
            f"Trace {str(p)!r} has format version {header['goose_trace']}, this goose reads version {TRACE_VERSION}."
        )
    sections: list[dict] = [{"header": {}, "records": []}]
    token_text: dict[int, str] = {}
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if "goose_section" in obj:
                sections.append({"header": obj["goose_section"], "records": []})
                continue
            sections[-1]["records"].append(StepRecord.from_dict(obj))
            token_text.update({int(k): v for k, v in obj.get("token_text", {}).items()})
        except (json.JSONDecodeError, TypeError, KeyError):
            if lineno == len(lines):  # a run cut off mid-write: keep what is complete
                break
            raise TraceError(f"Trace {str(p)!r} is damaged at line {lineno}.") from None
    sections = [s for s in sections if s["records"] or s["header"]]
    if not any(s["records"] for s in sections):
        raise TraceError(f"Trace {str(p)!r} holds no steps.")
    return Trace(header=header, sections=sections, token_text=token_text)


def source_counts(records: list[StepRecord]) -> dict[str, dict[str, int]]:
    """Per source tag: tree nodes offered (root excluded) and accepted."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        for src in r.sources[1:]:
            out.setdefault(src, {"offered": 0, "accepted": 0})["offered"] += 1
        for node in r.accepted[1:]:
            out[r.sources[node]]["accepted"] += 1
    return out
