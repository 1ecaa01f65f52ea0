"""The individual checks of scripts/gpu_check.py. Each returns a row: ``name``, ``setting``, ``figures`` (one
short line for the table), ``ok`` and its raw numbers. A row is ok only through a test that can fail, and each
verdict is a function of the measurements alone (``tree_verdict``, ``identity_verdict``, ``doctor_verdict``,
``timing_sanity``), so tests/scripts/test_gpu_check_rows.py can feed it wrong ones and see it fail.

Every identity row compares outputs the same way (``judge``): identical, or first different where the
reference's top-2 logits are within ``tie_margin`` (rounding alone can swap them there), or a real difference.
The reference's top-2 logits come from one fresh causal pass over its own output (``reference``), which also
checks the reference itself: where that pass's argmax is clear, the reference must have emitted it.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import torch

from drafting.bench.identity import first_divergence
from drafting.engine.decode import Decoder
from drafting.engine.hf.forward import HFForward
from drafting.engine.hf.kv_cache import new_cache
from drafting.engine.tree import Draft, DraftTree
from drafting.machine.cost_curve import CostCurve, measure
from drafting.machine.step_hooks import machine_hooks
from drafting.machine.verify_cost import is_sane
from drafting.speculators import create

FP32_ATOL = 1e-3  # tree vs sequential logits in float32 (kernels differ between row counts, the maths does not)

# A tree pass, a one-row pass and a full causal pass round differently. bfloat16 keeps 8 significant bits, so
# its numbers near a logit x are ulp(x) = 2**(floor(log2|x|) - 7) apart. Measured on CPU, the top-2 logits of
# the check models (gpu_models.PEAK) came out of two such passes at most 2 ulps apart (4 layers) and at most 5
# (30 layers); two logits each that far off in opposite directions move their gap by up to 10. A first
# difference where the reference's top-2 gap is at most TIE_ULPS ulps of its larger logit is a near-tie; a
# larger gap is a real difference. In float32 the passes agree to FP32_ATOL (the tree-logits row checks it),
# so there a gap of twice that is the tie.
TIE_ULPS = 8

# An identity row proves something only where most reference tokens had a gap beyond the tie margin (a bug that
# changes the logits shows up at the first such token). On the check models about 40-75% do; flat logits (the
# plain initialisation of a wide model) fall well below this floor and the row fails instead of passing idly.
MIN_DECISIVE = 0.25


def ulp(x, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype``'s numbers at |x|: 2**(floor(log2|x|)) * eps, i.e. 2**(e - 7) for bfloat16."""
    x = torch.as_tensor(x, dtype=torch.float32).abs().clamp_min(torch.finfo(torch.float32).tiny)
    return torch.exp2(torch.floor(torch.log2(x))) * torch.finfo(dtype).eps


def tie_margin(top2: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """How close the top two logits (last dimension) must be for rounding alone to swap them in ``dtype``."""
    if dtype == torch.float32:
        return torch.full(top2.shape[:-1], 2 * FP32_ATOL)
    return TIE_ULPS * ulp(top2.abs().amax(-1), dtype)


def near_tie(top2: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (top2[..., 0] - top2[..., 1]) <= tie_margin(top2, dtype)


@dataclass
class Reference:
    """A reference output and the model's top-2 logits before each of its tokens."""

    ids: list[int]
    top2: torch.Tensor  # (len(ids), 2), float32 on the host
    argmax: list[int]


@torch.inference_mode()
def reference(lm, prompt: list[int], output: list[int]) -> Reference:
    """``output``'s top-2 logits from one fresh causal pass over ``prompt`` + ``output`` (no cache, no tree)."""
    if not output:
        return Reference([], torch.zeros((0, 2)), [])
    ids = prompt + output[:-1]
    x = torch.tensor([ids], device=lm.device)
    pos = torch.arange(len(ids), device=lm.device)[None]
    logits = lm.model(input_ids=x, position_ids=pos, logits_to_keep=len(output)).logits[0].float()
    top = logits.topk(2, dim=-1)
    return Reference(list(output), top.values.cpu(), top.indices[:, 0].tolist())


def judge(ref: Reference, got: list[int], dtype: torch.dtype, exact: bool) -> dict:
    """``got`` against ``ref``: "identical"; "tie" where the first difference is at a near-tie of the reference's
    top-2 logits (only when not ``exact``); else "differs". With where, and the gap and margin there."""
    div = first_divergence(ref.ids, got)
    if div is None:
        return {"verdict": "identical"}
    if div >= len(ref.ids):  # the reference stopped (EOS) where this one went on
        return {"verdict": "differs", "at": div, "gap": None, "margin": None}
    top2 = ref.top2[div]
    gap, margin = float(top2[0] - top2[1]), float(tie_margin(top2, dtype))
    tie = gap <= margin and not exact
    return {"verdict": "tie" if tie else "differs", "at": div, "gap": gap, "margin": margin}


def unexplained(ref: Reference, dtype: torch.dtype) -> int:
    """Reference tokens that are not the fresh pass's argmax where its top-2 gap is beyond a tie: a reference
    that decodes wrongly (its cache, its masks) would otherwise pass every comparison made against it."""
    tie = near_tie(ref.top2, dtype).tolist()
    return sum(t != a and not n for t, a, n in zip(ref.ids, ref.argmax, tie))


def identity_verdict(pairs: dict[str, list[tuple[Reference, list[int]]]], dtype: torch.dtype, exact: bool) -> dict:
    """Every (reference, output) pair of every speculator judged; ok when none differs, every reference agrees
    with its fresh pass and at least MIN_DECISIVE of the reference tokens were beyond a tie."""
    per_spec, refs = {}, {}
    for spec, items in pairs.items():
        judged = [judge(ref, got, dtype, exact) for ref, got in items]
        for ref, _ in items:
            refs[id(ref)] = ref
        per_spec[spec] = {"identical": sum(j["verdict"] == "identical" for j in judged),
                          "at_ties": sum(j["verdict"] == "tie" for j in judged),
                          "differ": sum(j["verdict"] == "differs" for j in judged), "of": len(judged),
                          "divergences": [j for j in judged if j["verdict"] != "identical"]}
    positions = sum(len(r.ids) for r in refs.values())
    decisive = sum(int((~near_tie(r.top2, dtype)).sum()) for r in refs.values())
    wrong = sum(unexplained(r, dtype) for r in refs.values())
    ok = (positions > 0 and decisive >= MIN_DECISIVE * positions and wrong == 0
          and all(v["differ"] == 0 and v["of"] > 0 for v in per_spec.values()))
    return {"ok": ok, "speculators": per_spec, "reference_tokens": positions, "beyond_tie": decisive,
            "reference_unexplained": wrong}


def identity_figures(v: dict) -> str:
    """`goose 3/4+1 tie` per speculator, the first real difference if any, and what the reference tokens say."""
    parts, worst = [], None
    for spec, s in v["speculators"].items():
        part = f"{spec} {s['identical']}/{s['of']}" + (f"+{s['at_ties']} tie" if s["at_ties"] else "")
        parts.append(part + (f" ({s['differ']} DIFFER)" if s["differ"] else ""))
        worst = worst or next((d for d in s["divergences"] if d["verdict"] == "differs"), None)
    text = ", ".join(parts)
    if worst is not None:
        where = (f"gap {worst['gap']:.3g} > tie {worst['margin']:.3g}" if worst["gap"] is not None
                 else "the reference had stopped")
        text += f"; first real difference at token {worst['at']} ({where})"
    n, d = v["reference_tokens"], v["beyond_tie"]
    text += f"; reference: {d}/{n} tokens beyond a tie"
    if n and d < MIN_DECISIVE * n:
        text += f" (TOO FEW: under {MIN_DECISIVE:.0%}, nothing to prove)"
    if v["reference_unexplained"]:
        text += f", {v['reference_unexplained']} NOT the fresh pass's clear argmax"
    return text


def _random_tree(rng: random.Random, root: int, size: int, vocab: int) -> DraftTree:
    tree = DraftTree(root)
    while len(tree) < size:
        tree.add(rng.randrange(2, vocab - 1), rng.randrange(len(tree)), "probe")
    return tree


@torch.inference_mode()
def _sequential_last(lm, ids: list[int]) -> torch.Tensor:
    x = torch.tensor([ids], device=lm.device)
    pos = torch.arange(len(ids), device=lm.device)[None]
    return lm.model(input_ids=x, position_ids=pos, logits_to_keep=1).logits[0, -1].float()


def tree_vs_sequential(lm, seeds: int, max_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(tree rows, sequential rows): every node of random trees scored in one tree pass, and by a fresh
    sequential pass over its path; float32 on the host, one row per node."""
    fwd = HFForward(lm.model, lm.dtype, lm.device)
    vocab = lm.vocab_size
    tree_rows, seq_rows = [], []
    for seed in range(seeds):
        rng = random.Random(seed)
        prefix = [rng.randrange(2, vocab - 1) for _ in range(rng.randrange(8, 96))]
        cache = new_cache(lm.model.config)
        fwd.prefill(prefix[:-1], cache)
        tree = _random_tree(rng, prefix[-1], rng.randrange(max_nodes // 2, max_nodes + 1), vocab)
        tree_rows.append(fwd.step(Draft(tree=tree), cache).float().cpu())
        for node in range(len(tree)):
            seq_rows.append(_sequential_last(lm, prefix[:-1] + [tree.tokens[i] for i in tree.path_to(node)]).cpu())
    return torch.cat(tree_rows), torch.stack(seq_rows)


def tree_verdict(tree: torch.Tensor, seq: torch.Tensor, dtype: torch.dtype) -> dict:
    """float32: every logit within FP32_ATOL. Lower precision: no argmax flip where the sequential top-2 gap is
    beyond a tie, and enough nodes beyond a tie for that to mean something."""
    nodes = len(seq)
    top = seq.topk(2, dim=-1)
    tie = near_tie(top.values, dtype)
    worst = float((tree - seq).abs().max()) if nodes else math.inf
    top_err = (tree.gather(1, top.indices) - top.values).abs().amax(-1) / ulp(top.values.abs().amax(-1), dtype)
    flips = tree.argmax(-1) != top.indices[:, 0]
    untied = int((flips & ~tie).sum())
    decisive = int((~tie).sum())
    if dtype == torch.float32:
        ok = nodes > 0 and worst <= FP32_ATOL
        bound = f"max |diff| {worst:.2e} (at most {FP32_ATOL:g})"
    else:
        ok = nodes > 0 and untied == 0 and decisive >= MIN_DECISIVE * nodes
        bound = f"max |diff| {worst:.2e}, top-2 at most {float(top_err.max()) if nodes else 0:.0f} ulps apart"
    return {
        "ok": ok, "figures": (f"{bound} over {nodes} nodes ({decisive} beyond a tie); argmax flips "
                              f"{int(flips.sum())} ({untied} beyond a tie)"),
        "max_abs_diff": worst, "top2_max_ulps": float(top_err.max()) if nodes else None, "nodes": nodes,
        "nodes_beyond_tie": decisive, "argmax_flips": int(flips.sum()), "flips_beyond_tie": untied,
    }


def tree_logits(lm, seeds: int, max_nodes: int) -> dict:
    """Every node of random trees scored in one pass against a fresh sequential pass over its path."""
    tree, seq = tree_vs_sequential(lm, seeds, max_nodes)
    return {"name": "tree logits", "setting": f"{_dt(lm)}, {seeds} trees <= {max_nodes} nodes",
            **tree_verdict(tree, seq, lm.dtype)}


def repetitive_prompts(vocab: int, count: int, seed: int = 0) -> list[list[int]]:
    """Token prompts that repeat a segment, so context matching has something to copy."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        seg = [rng.randrange(2, vocab - 1) for _ in range(12)]
        noise = [rng.randrange(2, vocab - 1) for _ in range(5)]
        out.append(seg + noise + seg + noise[:2] + seg[:6])
    return out


def greedy_identity(lm, specs: list[str], prompts: list[list[int]], new_tokens: int) -> dict:
    """Each speculator's greedy output against `ar`'s on the same model: identical in float32; in half
    precision identical or first different at a near-tie of `ar`'s top-2 logits."""
    ar = Decoder(lm, create("ar"), hooks=machine_hooks())
    refs = [reference(lm, p, ar.generate(p, new_tokens).output_ids) for p in prompts]
    pairs, accepted = {}, {}
    for spec in specs:
        dec = Decoder(lm, create(spec), hooks=machine_hooks())
        results = [dec.generate(p, new_tokens) for p in prompts]
        pairs[spec] = [(ref, r.output_ids) for ref, r in zip(refs, results)]
        accepted[spec] = sum(r.mean_accepted for r in results) / len(results)
    v = identity_verdict(pairs, lm.dtype, exact=lm.dtype == torch.float32)
    for spec, s in v["speculators"].items():
        s["mean_accepted"] = accepted[spec]
    figures = identity_figures(v) + f"; mean accepted {max(accepted.values()):.2f} at best"
    return {"name": "greedy identity", "setting": f"{_dt(lm)}, {len(prompts)} prompts x {new_tokens} tokens",
            "figures": figures, **v}


def doctor_verdict(asked: tuple[int, ...], sizes: list[int], seconds: list[float], prefill_s: float) -> str | None:
    """None when the measurements are a cost curve, else what is wrong with them (one phrase): every size asked
    for, every time finite and positive, and no size clearly cheaper than a smaller one or dearer than in
    proportion to its rows (drafting.machine.verify_cost.is_sane, the rule cached curves are held to)."""
    if list(sizes) != list(asked):
        return f"sizes {list(sizes)} measured, not {list(asked)}"
    if not all(math.isfinite(s) and s > 0 for s in [*seconds, prefill_s]):
        return "a time that is not a positive number"
    if not is_sane(CostCurve(sizes=list(sizes), seconds=list(seconds))):
        return "not a cost curve: more rows clearly cheaper, or dearer than in proportion"
    return None


def doctor(lm, sizes: tuple[int, ...], prefix: int, repeats: int = 3) -> dict:
    """`goose doctor`'s measurements on ``lm``: prefill speed and the verification cost curve."""
    fwd = HFForward(lm.model, lm.dtype, lm.device)
    ids = [100 + (i * 7919) % max(1, min(lm.vocab_size, 32000) - 100) for i in range(prefix)]
    best = float("inf")
    for _ in range(2):  # the first run warms up
        cache = new_cache(lm.model.config)
        _sync(lm)
        t0 = time.perf_counter()
        fwd.prefill(ids, cache)
        _sync(lm)
        best = min(best, time.perf_counter() - t0)
    del cache
    curve = measure(lm, sizes=sizes, prefix=prefix, repeats=repeats)
    wrong = doctor_verdict(sizes, curve.sizes, curve.seconds, best)
    if wrong:  # measured once more, as goose does with a cached curve that looks taken on a busy machine
        curve = measure(lm, sizes=sizes, prefix=prefix, repeats=repeats)
        wrong = doctor_verdict(sizes, curve.sizes, curve.seconds, best)
    ms = [1000 * s for s in curve.seconds]
    rel = [s / curve.seconds[0] for s in curve.seconds] if curve.seconds and curve.seconds[0] > 0 else []
    flat = max((n for n, r in zip(curve.sizes, rel) if r <= 1.5), default=1)
    figures = (f"1 row {ms[0]:.2f} ms ({1000 / ms[0]:.0f} tok/s), {curve.sizes[-1]} rows {rel[-1]:.2f}x; "
               f"<= 1.5x up to {flat} rows; prefill {prefix / best:.0f} tok/s") if rel else "no curve"
    return {
        "name": "doctor", "setting": f"{lm.name}, {prefix} cached",
        "figures": figures + (f"; {wrong.upper()}" if wrong else ""), "ok": wrong is None,
        "sizes": list(curve.sizes), "ms": ms, "relative": rel, "prefill_tokens_per_s": prefix / best,
        "flat_up_to_rows": flat,
    }


def timer_overhead(lm, calls: int = 50) -> tuple[float, float]:
    """(seconds per one-row forward, extra seconds per forward with the bench's forward timer attached), each
    the best of two back-to-back loops that wait for the device only at their end."""
    from drafting.bench.timing import ForwardTimer

    fwd = HFForward(lm.model, lm.dtype, lm.device)
    cache = new_cache(lm.model.config)
    fwd.prefill(list(range(3, 67)), cache)
    draft = Draft(tree=DraftTree(5))

    def loop() -> float:
        _sync(lm)
        t0 = time.perf_counter()
        for _ in range(calls):
            fwd.step(draft, cache)
            cache.crop(-1)
        _sync(lm)
        return (time.perf_counter() - t0) / calls

    loop()  # warm-up
    base = min(loop(), loop())
    timer = ForwardTimer(lm.model, lm.device)
    try:
        timed = min(loop(), loop())
        timed_calls = len(timer.take())
    finally:
        timer.close()
    if timed_calls != 2 * calls:
        raise RuntimeError(f"the forward timer saw {timed_calls} of {2 * calls} forwards.")
    return base, timed - base


def timing_sanity(runs: list[dict], overhead: tuple[float, float] | None = None) -> dict:
    """Phases add up: draft + verify + prefill never exceed a run's wall time, forwards never exceed it; and
    there are runs, each of which took time."""
    worst = 0.0
    for r in runs:
        parts = r["draft_s"] + r["verify_s"] + r["prefill_s"]
        worst = max(worst, parts / r["wall_s"] if r["wall_s"] else 0.0,
                    r["forward_s"] / r["wall_s"] if r["wall_s"] and not r.get("external") else 0.0)
    timed = bool(runs) and all(r["wall_s"] > 0 for r in runs)
    ok = timed and worst <= 1.02
    figures = f"largest (phases or forwards) / wall {worst:.3f} over {len(runs)} runs"
    if not timed:
        figures += "; NO TIMED RUNS" if not runs else "; A RUN WITHOUT WALL TIME"
    out = {"name": "timing", "setting": "phase clock + forward timer", "figures": figures, "ok": ok,
           "worst_ratio": worst}
    if overhead is not None:
        base, extra = overhead
        out["figures"] += f"; forward timer {1e6 * extra:+.1f} us a forward ({100 * extra / base:+.1f}% of one row)"
        out.update(forward_s=base, timer_extra_s=extra)
    return out


def _sync(lm) -> None:
    if lm.device.type == "cuda":
        torch.cuda.synchronize(lm.device)


def _dt(lm) -> str:
    return str(lm.dtype).replace("torch.", "")
