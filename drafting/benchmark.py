"""Side-by-side benchmarks: every speculator on every prompt, in turn, against plain decoding (`ar`).

The runner yields one result dict per prompt x speculator as soon as it finishes (the caller saves it), so an
interrupted run loses nothing and a resumed one skips what is done. ``summarize`` turns result dicts into the
per-speculator and per-task summary; it knows nothing about any particular speculator: per-source acceptance
comes from the step records' node sources, and everything a speculator puts into ``draft.info`` or
``stats()`` is aggregated generically (numbers: sum and mean; strings: counts per value).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import torch

from .decode import ContextError, Decoder, GenerationResult
from .hf_pld import NAME as HF_PLD, HFPromptLookup
from .llama_cpp_ref import NAMES as LLAMA_CPP_NAMES, PLD as LLAMA_CPP_PLD, LlamaCppError, LlamaCppRunner
from .model import LoadedModel
from .prompt_file import Prompt
from .prompting import decode, encode
from .sampling import SamplingParams, make_acceptor
from .speculators import SpecError, create, registry
from .trace import StepRecord, TraceWriter

REFERENCE = "ar"
WARMUP_TOKENS = 8
EMA_POINTS = 12  # length of the kept `ema` trajectory per run
# A run differing from `ar` still counts as exact "up to ties" when its first divergence is at a position where
# `ar`'s top two logits were at most this far apart. In bf16 or int8 a tree pass rounds differently from a
# one-row pass (not a bug: the arithmetic differs), and such near-ties flip either way; fp32 needs no tolerance.
TIE_MARGIN = 0.5


class BenchError(ValueError):
    """A benchmark cannot start or resume; one sentence."""


# ---------------------------------------------------------------------------------------------- speculator list


def split_specs(text: str) -> list[str]:
    """Split ``ar,pld:max_ngram=3,draft=10,goose:budget=60`` into specs.

    Specs contain commas themselves, so a comma starts a new spec only where what follows is not a
    ``key=value`` option (a name alone, or a name followed by ``:``).
    """
    specs: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        eq, colon = part.find("="), part.find(":")
        starts_spec = eq < 0 or (0 <= colon < eq)
        if starts_spec or not specs:
            specs.append(part)
        else:
            specs[-1] += "," + part
    return specs


def known_names() -> list[str]:
    return list(registry()) + [HF_PLD, *LLAMA_CPP_NAMES]


def build_contenders(text: str, lm: LoadedModel, params: SamplingParams) -> list["Contender"]:
    """`ar` first (the reference), then each distinct spec once; raises SpecError for a bad spec."""
    specs = [REFERENCE] + split_specs(text)
    out: list[Contender] = []
    seen: set[str] = set()
    for spec in specs:
        if spec.strip() == HF_PLD:
            contender = Contender(hf=HFPromptLookup(lm, params))
        elif spec.strip().split(":")[0] == HF_PLD:
            raise SpecError(f"{HF_PLD!r} takes no options (it is transformers' generate(prompt_lookup_num_tokens=10)).")
        elif spec.strip() in LLAMA_CPP_NAMES:
            if not params.greedy:
                raise SpecError(f"{spec.strip()!r} runs greedy only; drop it or use --temperature 0.")
            contender = Contender(external=LlamaCppRunner(lm, pld=spec.strip() == LLAMA_CPP_PLD))
        elif spec.strip().split(":")[0] in LLAMA_CPP_NAMES:
            raise SpecError(f"{spec.strip().split(':')[0]!r} takes no options.")
        else:
            speculator = create(spec)
            margins = params.greedy and speculator.name == REFERENCE  # the tie test reads ar's top-2 margins
            contender = Contender(decoder=Decoder(lm, speculator, acceptor=make_acceptor(params), record_margins=margins))
        if contender.spec not in seen:
            seen.add(contender.spec)
            out.append(contender)
    return out


@dataclass
class Contender:
    """One entry of the comparison: a Decoder around ONE speculator instance for the whole run, or hf-pld."""

    decoder: Decoder | None = None
    hf: HFPromptLookup | None = None
    external: LlamaCppRunner | None = None  # another engine: timed beside ours, never compared token by token

    @property
    def spec(self) -> str:
        return self.decoder.speculator.spec() if self.decoder else (self.hf or self.external).spec()

    def stats(self) -> dict:
        return _flatten(self.decoder.speculator.stats() if self.decoder else (self.hf or self.external).stats())

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> GenerationResult:
        if self.decoder:
            return self.decoder.generate(prompt_ids, max_new_tokens)
        return (self.hf or self.external).generate(prompt_ids, max_new_tokens)


# ---------------------------------------------------------------------------------------------- forward timing


class ForwardTimer:
    """Times every call of the model's forward (hooks on the top module), to separate forward time from the
    rest of a step. Costs a few microseconds per call."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.durations: list[float] = []
        self._sync = device.type == "cuda"
        self._t0 = 0.0
        self._handles = [
            model.register_forward_pre_hook(self._pre),
            model.register_forward_hook(self._post),
        ]

    def _pre(self, *_):
        if self._sync:
            torch.cuda.synchronize()
        self._t0 = time.perf_counter()

    def _post(self, *_):
        if self._sync:
            torch.cuda.synchronize()
        self.durations.append(time.perf_counter() - self._t0)

    def take(self) -> list[float]:
        out, self.durations = self.durations, []
        return out

    def close(self) -> None:
        for h in self._handles:
            h.remove()


# ---------------------------------------------------------------------------------------------- one run


@dataclass
class BenchSettings:
    max_new_tokens: int = 128
    raw: bool = False
    params: SamplingParams = field(default_factory=SamplingParams)
    trace_dir: Path | None = None
    tie_margin: float = TIE_MARGIN


@dataclass
class Skip:
    prompt_id: str
    task: str
    reason: str


def prompt_fits(lm: LoadedModel, prompt: Prompt, raw: bool) -> str | None:
    """None if the first turn fits the context window, else the reason (one sentence)."""
    ids = encode(lm.tokenizer, [{"role": "user", "content": prompt.text}], raw=raw)
    if len(ids) + 1 > lm.max_context:
        return f"its {len(ids)} tokens do not fit the context window of {lm.max_context}"
    return None


def run_one(lm: LoadedModel, contender: Contender, prompt: Prompt, settings: BenchSettings, timer: ForwardTimer,
            reference: list[int] | None, reference_margins: list[float] | None = None) -> dict:
    """Run every turn of ``prompt`` with ``contender``, feeding back its own answers; return the run dict."""
    messages: list[dict] = []
    output: list[int] = []
    margins: list[float] = []
    records: list[StepRecord] = []
    wall = prefill = draft = verify = 0.0
    steps = 0
    forwards: list[float] = []
    stops: list[str] = []
    notes: list[str] = []
    prompt_tokens = 0
    stats_before = contender.stats()
    turn_results: list[tuple[str, list[int], GenerationResult]] = []
    timer.take()
    for k, turn in enumerate(prompt.turns):
        messages.append({"role": "user", "content": turn})
        ids = encode(lm.tokenizer, messages, raw=settings.raw)
        try:
            result = contender.generate(ids, settings.max_new_tokens)
        except (ContextError, LlamaCppError) as exc:
            notes.append(f"turn {k + 1} skipped: {exc}")
            break
        calls = timer.take()
        forwards += calls
        turn_results.append((turn, ids, result))
        prompt_tokens += len(ids)
        output += result.output_ids
        margins += result.margins or []
        messages.append({"role": "assistant", "content": decode(lm.tokenizer, result.output_ids, lm.eos_ids)})
        wall += result.wall_s
        stops.append(result.stop_reason)
        if contender.decoder:
            prefill += result.prefill_s
            draft += result.draft_s
            verify += result.verify_s
            steps += result.steps
            records += result.records
        elif contender.external:  # no torch forwards to time: its own first-token time is the prefill
            prefill += result.prefill_s
        else:  # hf-pld: its first forward is the prefill, and it already yields a token
            prefill += calls[0] if calls else 0.0
            steps += len(calls)
            verify += sum(calls[1:])
            draft += max(0.0, result.wall_s - sum(calls))
    forward_s = sum(forwards)
    stats_after = contender.stats()
    if contender.external:
        steps = int(stats_after.get("decode_calls", 0) - stats_before.get("decode_calls", 0)) - len(turn_results)
        forward_s = wall  # everything it does is its own engine
    run = {
        "prompt_id": prompt.id,
        "task": prompt.task,
        "speculator": contender.spec,
        "new_tokens": len(output),
        "wall_s": wall,
        "steps": steps,
        "mean_accepted": len(output) / steps if steps else 0.0,
        "draft_s": draft,
        "verify_s": verify,
        "identical_to_ar": None,
        "first_divergence": None,
        "prefill_s": prefill,
        "forward_passes": len(forwards),
        "forward_s": forward_s,
        "overhead_s": max(0.0, wall - forward_s),
        "prompt_tokens": prompt_tokens,
        "turns": len(turn_results),
        "stop_reason": stops[-1] if stops else "skipped",
        "output_ids": output,
        "sources": source_counts(records),
        "info": aggregate_info(records),
        "stats": {k: v - stats_before.get(k, 0) for k, v in stats_after.items()},
    }
    if notes:
        run["notes"] = notes
    if margins:
        run["margins"] = [round(m, 4) for m in margins]  # ar's top-2 logit gap at every emitted token
    if contender.external:
        run["external"] = True
    elif settings.params.greedy and contender.spec == REFERENCE:
        run["identical_to_ar"] = True
        run["exact_up_to_ties"] = True
    elif settings.params.greedy and reference is not None:
        div = first_divergence(reference, output)
        run["identical_to_ar"] = div is None
        run["first_divergence"] = div
        run.update(tie_check(div, reference_margins, settings.tie_margin))
    if settings.trace_dir is not None and contender.decoder and turn_results:
        write_trace(lm, settings, prompt, contender.spec, turn_results)
    return run


def tie_check(div: int | None, reference_margins: list[float] | None, tolerance: float) -> dict:
    """``exact_up_to_ties``: identical, or the first divergence is where `ar`'s top-2 logit margin was at most
    ``tolerance``; ``divergence_margin`` is that margin (None when identical or unknown)."""
    if div is None:
        return {"exact_up_to_ties": True, "divergence_margin": None, "tie_margin": tolerance}
    margin = reference_margins[div] if reference_margins is not None and div < len(reference_margins) else None
    return {"exact_up_to_ties": margin is not None and margin <= tolerance, "divergence_margin": margin,
            "tie_margin": tolerance}


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def trace_path(trace_dir: Path, prompt_id: str, spec: str) -> Path:
    safe = lambda s: re.sub(r"[^A-Za-z0-9._=-]+", "_", s).strip("_") or "x"  # noqa: E731
    return trace_dir / f"{safe(prompt_id)}__{safe(spec)}.jsonl"


def write_trace(lm: LoadedModel, settings: BenchSettings, prompt: Prompt, spec: str, turns) -> None:
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


# ---------------------------------------------------------------------------------------------- generic aggregation


def source_counts(records: list[StepRecord]) -> dict[str, dict[str, int]]:
    """Per source tag: tree nodes offered (root excluded) and accepted."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        for src in r.sources[1:]:
            out.setdefault(src, {"offered": 0, "accepted": 0})["offered"] += 1
        for node in r.accepted[1:]:
            out[r.sources[node]]["accepted"] += 1
    return out


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def aggregate_info(records: list[StepRecord]) -> dict[str, dict]:
    """``record.info`` over a run: numbers -> n/sum/mean; strings and booleans -> counts per value."""
    out: dict[str, dict] = {}
    ema: list[float] = []
    for r in records:
        for key, value in r.info.items():
            if _is_number(value):
                slot = out.setdefault(key, {"n": 0, "sum": 0.0})
                if "n" in slot:
                    slot["n"] += 1
                    slot["sum"] += value
                if key == "ema":
                    ema.append(float(value))
            elif isinstance(value, (str, bool)):
                slot = out.setdefault(key, {"counts": {}})
                if "counts" in slot:
                    word = str(value).lower() if isinstance(value, bool) else value
                    slot["counts"][word] = slot["counts"].get(word, 0) + 1
    for slot in out.values():
        if "n" in slot:
            slot["mean"] = slot["sum"] / slot["n"] if slot["n"] else 0.0
    if ema:
        idx = sorted({round(i * (len(ema) - 1) / max(1, EMA_POINTS - 1)) for i in range(EMA_POINTS)})
        out["ema"]["trajectory"] = [round(ema[i], 4) for i in idx]
    return out


def _flatten(d: dict, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        elif _is_number(v):
            out[f"{prefix}{k}"] = v
    return out


def _merge_info(into: dict, info: dict) -> None:
    for key, slot in info.items():
        have = into.setdefault(key, {"n": 0, "sum": 0.0} if "n" in slot else {"counts": {}})
        if "n" in slot and "n" in have:
            have["n"] += slot["n"]
            have["sum"] += slot["sum"]
            have["mean"] = have["sum"] / have["n"] if have["n"] else 0.0
            if "trajectory" in slot:
                have.setdefault("trajectories", []).append(slot["trajectory"])
        elif "counts" in slot and "counts" in have:
            for word, c in slot["counts"].items():
                have["counts"][word] = have["counts"].get(word, 0) + c


# ---------------------------------------------------------------------------------------------- summary


def _totals(runs: list[dict], ar_by_prompt: dict[str, dict], greedy: bool) -> dict:
    tokens = sum(r["new_tokens"] for r in runs)
    external = any(r.get("external") for r in runs)  # another engine's rows have no identity column
    wall = sum(r["wall_s"] for r in runs)
    steps = sum(r["steps"] for r in runs)
    refs = [ar_by_prompt[r["prompt_id"]] for r in runs if r["prompt_id"] in ar_by_prompt]
    ar_tokens = sum(r["new_tokens"] for r in refs)
    ar_wall = sum(r["wall_s"] for r in refs)
    tps = tokens / wall if wall else 0.0
    ar_tps = ar_tokens / ar_wall if ar_wall else 0.0
    return {
        "tokens_per_s": tps,
        "speedup": tps / ar_tps if ar_tps and len(refs) == len(runs) else None,
        "mean_accepted": tokens / steps if steps else 0.0,
        "identical": sum(1 for r in runs if r["identical_to_ar"]) if greedy and not external else None,
        "exact_up_to_ties": sum(1 for r in runs if r.get("exact_up_to_ties", r["identical_to_ar"]))
        if greedy and not external else None,
        "divergence_margins": [r["divergence_margin"] for r in runs if r.get("divergence_margin") is not None],
        "prompts": len(runs),
        "new_tokens": tokens,
        "wall_s": wall,
        "steps": steps,
    }


def summarize(runs: list[dict], greedy: bool = True) -> dict:
    """Per speculator (in first-seen order): overall and per-task totals, speedup vs `ar` on the same prompts,
    and the generic details (per-source acceptance, info aggregates, stats counters, forward overhead)."""
    ar_by_prompt = {r["prompt_id"]: r for r in runs if r["speculator"] == REFERENCE}
    by_spec: dict[str, list[dict]] = {}
    for r in runs:
        by_spec.setdefault(r["speculator"], []).append(r)
    summary: dict[str, dict] = {}
    for spec, rs in by_spec.items():
        entry = _totals(rs, ar_by_prompt, greedy)
        tasks: dict[str, list[dict]] = {}
        for r in rs:
            tasks.setdefault(r["task"], []).append(r)
        entry["by_task"] = {t: _totals(trs, ar_by_prompt, greedy) for t, trs in tasks.items()}
        forward = sum(r.get("forward_s", 0.0) for r in rs)
        overhead = sum(r.get("overhead_s", 0.0) for r in rs)
        sources: dict[str, dict[str, int]] = {}
        info: dict[str, dict] = {}
        stats: dict[str, float] = {}
        for r in rs:
            for src, c in r.get("sources", {}).items():
                have = sources.setdefault(src, {"offered": 0, "accepted": 0})
                have["offered"] += c["offered"]
                have["accepted"] += c["accepted"]
            _merge_info(info, r.get("info", {}))
            for k, v in r.get("stats", {}).items():
                stats[k] = stats.get(k, 0) + v
        for c in sources.values():
            c["rate"] = c["accepted"] / c["offered"] if c["offered"] else 0.0
        entry["details"] = {
            "forward_s": forward,
            "overhead_s": overhead,
            "overhead_ratio": overhead / forward if forward else 0.0,
            "overhead_per_step_ms": 1000 * overhead / max(1, entry["steps"]),
            "forward_per_step_ms": 1000 * forward / max(1, sum(r.get("forward_passes", 0) for r in rs)),
            "sources": sources,
            "info": info,
            "stats": stats,
        }
        summary[spec] = entry
    return summary


# ---------------------------------------------------------------------------------------------- results file


class ResultsFile:
    """The --json output, rewritten whole (write-then-rename) after every run, so it is always valid JSON."""

    def __init__(self, path: Path | None, meta: dict, resume: bool):
        self.path = path
        self.meta = meta
        self.runs: list[dict] = []
        self.skipped: list[dict] = []
        if resume:
            if path is None:
                raise BenchError("--resume needs --json OUT (the results file to continue).")
            if path.exists():
                self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise BenchError(f"Cannot resume: {str(self.path)!r} is not a goose bench JSON file.") from None
        if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
            raise BenchError(f"Cannot resume: {str(self.path)!r} is not a goose bench JSON file.")
        for key in ("model", "max_new_tokens", "sampling", "raw", "prompt_file", "dtype", "weights"):
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
        return {**self.meta, "complete": complete, "runs": self.runs, "skipped": self.skipped,
                "summary": summarize(self.runs, greedy)}

    def save(self, complete: bool = False) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.document(complete), indent=1), encoding="utf-8")
        os.replace(tmp, self.path)


# ---------------------------------------------------------------------------------------------- the run


def warm_up(lm: LoadedModel, contenders: list[Contender], prompt: Prompt, raw: bool) -> None:
    """One short generation per engine kind, so first-call costs do not land on the first measured run."""
    ids = encode(lm.tokenizer, [{"role": "user", "content": prompt.text}], raw=raw)
    if len(ids) + WARMUP_TOKENS + 1 > lm.max_context:
        ids = ids[-(lm.max_context // 2):]
    Decoder(lm, create(REFERENCE)).generate(ids, WARMUP_TOKENS)
    for c in contenders:
        if c.hf or c.external:
            (c.hf or c.external).generate(ids, WARMUP_TOKENS)


def run_bench(lm: LoadedModel, contenders: list[Contender], prompts: list[Prompt], settings: BenchSettings,
              results: ResultsFile, warmup: bool = True) -> Iterator[dict | Skip]:
    """Yield each finished run (already saved in ``results``) or Skip; speculators interleave per prompt."""
    done = results.done()
    timer = ForwardTimer(lm.model, lm.device)
    try:
        todo = [p for p in prompts if any((p.id, c.spec) not in done for c in contenders)]
        if warmup and todo:
            warm_up(lm, contenders, todo[0], settings.raw)
        for prompt in todo:
            reason = prompt_fits(lm, prompt, settings.raw)
            if reason:
                skip = Skip(prompt.id, prompt.task, f"prompt {prompt.id!r} skipped: {reason}.")
                results.skip(skip)
                yield skip
                continue
            for c in contenders:
                if (prompt.id, c.spec) in done:
                    continue
                run = run_one(lm, c, prompt, settings, timer, results.reference(prompt.id),
                              results.reference_margins(prompt.id))
                results.add(run)
                yield run
    finally:
        timer.close()
