"""What the bench aggregates, generically: per-source acceptance from the step records' node sources, and
everything a speculator puts into ``draft.info`` or ``stats()`` (numbers: sum and mean; strings: counts per
value); then, over runs, the per-speculator and per-task summary with speedups on the same prompts against `ar`
and against the fastest plain decoding of the run (the faster of `ar` and transformers' own `hf-ar`).
A summary column is added in ``_totals`` (per speculator and per task) or in ``summarize``'s details."""

from __future__ import annotations

from drafting.engine.trace import StepRecord
from drafting.baselines.hf_generate import NAME as HF_AR
from drafting.baselines.llama_cpp import PLAIN as LLAMA_CPP
from drafting.bench.contenders import REFERENCE, is_number

PLAIN = (REFERENCE, HF_AR, LLAMA_CPP)  # the plain decodings a speculator's speedup is measured against

EMA_POINTS = 12  # length of the kept `ema` trajectory per run


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


def _speedup(runs: list[dict], ref_by_prompt: dict[str, dict]) -> float | None:
    """Total tokens/s of ``runs`` over the reference's on the same prompts (None unless it ran them all)."""
    refs = [ref_by_prompt[r["prompt_id"]] for r in runs if r["prompt_id"] in ref_by_prompt]
    if not refs or len(refs) != len(runs):
        return None
    wall, ref_wall = sum(r["wall_s"] for r in runs), sum(r["wall_s"] for r in refs)
    if not wall or not ref_wall:
        return None
    return (sum(r["new_tokens"] for r in runs) / wall) / (sum(r["new_tokens"] for r in refs) / ref_wall)


def _totals(runs: list[dict], ar_by_prompt: dict[str, dict], greedy: bool,
            plain_by_prompt: dict[str, dict] | None = None) -> dict:
    tokens = sum(r["new_tokens"] for r in runs)
    # another engine's rows, and transformers' rows on a network other than ours, have no identity column
    external = any(r.get("external") or r.get("other_network") for r in runs)
    wall = sum(r["wall_s"] for r in runs)
    steps = sum(r["steps"] for r in runs)
    tps = tokens / wall if wall else 0.0
    return {
        "tokens_per_s": tps,
        "speedup": _speedup(runs, ar_by_prompt),
        "speedup_vs_plain": _speedup(runs, plain_by_prompt if plain_by_prompt is not None else ar_by_prompt),
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


def plain_reference(runs: list[dict]) -> str:
    """The fastest plain decoding of the run (`ar`, `hf-ar` or `llama.cpp`), by total tokens/s over the prompts
    all of those that ran have in common; `ar` where no other ran."""
    by = {name: {r["prompt_id"]: r for r in runs if r["speculator"] == name} for name in PLAIN}
    ran = [name for name in PLAIN if by[name]]
    common = set.intersection(*(set(by[n]) for n in ran)) if ran else set()
    if len(ran) < 2 or not common:
        return REFERENCE
    rate = {n: sum(by[n][p]["new_tokens"] for p in common) / max(1e-12, sum(by[n][p]["wall_s"] for p in common))
            for n in ran}
    return max(ran, key=lambda n: (rate[n], n == REFERENCE))


def summarize(runs: list[dict], greedy: bool = True) -> dict:
    """Per speculator (in first-seen order): overall and per-task totals, speedup vs `ar` and vs the run's fastest
    plain decoding (``plain_reference``: `ar` or `hf-ar`) on the same prompts,
    and the generic details (per-source acceptance, info aggregates, stats counters, forward overhead)."""
    ar_by_prompt = {r["prompt_id"]: r for r in runs if r["speculator"] == REFERENCE}
    plain = plain_reference(runs)
    plain_by_prompt = {r["prompt_id"]: r for r in runs if r["speculator"] == plain}
    by_spec: dict[str, list[dict]] = {}
    for r in runs:
        by_spec.setdefault(r["speculator"], []).append(r)
    summary: dict[str, dict] = {}
    for spec, rs in by_spec.items():
        entry = _totals(rs, ar_by_prompt, greedy, plain_by_prompt)
        entry["plain_reference"] = plain
        entry["device"] = rs[-1].get("device")  # where the row ran (None in files written before rows said)
        tasks: dict[str, list[dict]] = {}
        for r in rs:
            tasks.setdefault(r["task"], []).append(r)
        entry["by_task"] = {t: _totals(trs, ar_by_prompt, greedy, plain_by_prompt) for t, trs in tasks.items()}
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
        passes = sum(r.get("forward_passes", 0) for r in rs)  # none for a row timed outside goose (external)
        entry["details"] = {
            "forward_s": forward,
            "overhead_s": overhead,
            "overhead_ratio": overhead / forward if forward else 0.0,
            "overhead_per_step_ms": 1000 * overhead / max(1, entry["steps"]) if passes else None,
            "forward_per_step_ms": 1000 * forward / passes if passes else None,
            "sources": sources,
            "info": info,
            "stats": stats,
        }
        summary[spec] = entry
    return summary
