"""What the bench aggregates, generically: per-source acceptance from the step records' node sources, and
everything a speculator puts into ``draft.info`` or ``stats()`` (numbers: sum and mean; strings: counts per
value); then, over runs, the per-speculator and per-task summary with speedups against `ar` on the same prompts.
A summary column is added in ``_totals`` (per speculator and per task) or in ``summarize``'s details."""

from __future__ import annotations

from ..trace import StepRecord
from .contenders import REFERENCE, is_number

EMA_POINTS = 12  # length of the kept `ema` trajectory per run


def source_counts(records: list[StepRecord]) -> dict[str, dict[str, int]]:
    """Per source tag: tree nodes offered (root excluded) and accepted."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        for src in r.sources[1:]:
            out.setdefault(src, {"offered": 0, "accepted": 0})["offered"] += 1
        for node in r.accepted[1:]:
            out[r.sources[node]]["accepted"] += 1
    return out


def aggregate_info(records: list[StepRecord]) -> dict[str, dict]:
    """``record.info`` over a run: numbers -> n/sum/mean; strings and booleans -> counts per value."""
    out: dict[str, dict] = {}
    ema: list[float] = []
    for r in records:
        for key, value in r.info.items():
            if is_number(value):
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
