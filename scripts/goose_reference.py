"""vLLM against goose on the same prompts: a ``goose bench --json`` file read back, its ``ar`` outputs compared
token by token with vLLM's no-speculation outputs, and its speeds kept beside vLLM's.

A divergence is reported with goose's top-2 logit margin at that token (``goose bench`` records it for
``ar``), so a near-tie of two different kernels can be told from a model read wrongly.
"""

from __future__ import annotations

import json
from pathlib import Path

from drafting.bench.identity import first_divergence


class GooseReferenceError(ValueError):
    """A goose bench results file that cannot be used; one sentence."""


def eos_ids(model: str) -> set[int]:
    """The model folder's end-of-sequence ids (vLLM keeps the EOS it stopped on; goose may not)."""
    out: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        path = Path(model) / name
        if path.is_file():
            eos = json.loads(path.read_text()).get("eos_token_id")
            out |= set(eos) if isinstance(eos, list) else {eos} if isinstance(eos, int) else set()
    return out


def load(path: str) -> list[dict]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise GooseReferenceError(f"Cannot read the goose bench results {path!r} ({exc}).") from None
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list) or not any(r.get("speculator") == "ar" for r in runs):
        raise GooseReferenceError(f"{path!r} is not a goose bench --json file with ar runs.")
    return runs


def _strip_eos(ids: list[int], eos: set[int]) -> list[int]:
    return ids[:-1] if ids and ids[-1] in eos else ids


def compare(vllm_none: list[dict], goose_runs: list[dict], eos: set[int]) -> dict:
    """Per prompt in both: identical, or the first divergence with goose ar's top-2 margin there; and
    goose bench's tokens/s of each speculator over those prompts."""
    ar = {r["prompt_id"]: r for r in goose_runs if r.get("speculator") == "ar"}
    rows = []
    for run in vllm_none:
        ref = ar.get(run["id"])
        if ref is None:
            continue
        a, b = _strip_eos(run["output_ids"], eos), _strip_eos(list(ref["output_ids"]), eos)
        n = min(len(a), len(b))
        div = first_divergence(a, b)
        margins = ref.get("margins") or []
        length_only = div is not None and div == n  # one stopped earlier: another token limit, or an EOS
        rows.append({"id": run["id"], "identical": div is None, "first_divergence": div, "length_only": length_only,
                     "goose_margin": margins[div] if div is not None and div < len(margins) and not length_only else None})
    ids = {r["id"] for r in rows}
    speeds = {}
    for spec in sorted({r.get("speculator") for r in goose_runs if r.get("prompt_id") in ids} - {None}):
        mine = [r for r in goose_runs if r.get("speculator") == spec and r.get("prompt_id") in ids]
        wall = sum(r.get("wall_s", 0.0) for r in mine)
        speeds[spec] = {"tokens_per_s": sum(r.get("new_tokens", 0) for r in mine) / wall if wall else None,
                        "prompts": len(mine)}
    return {"none_vs_goose_ar": rows, "identical": sum(r["identical"] for r in rows), "prompts": len(rows),
            "goose_bench": speeds}
