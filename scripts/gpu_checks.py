"""The individual checks of scripts/gpu_check.py. Each returns a dict: ``name``, ``setting``, ``figures`` (one
short line for the table), ``ok`` and its raw numbers."""

from __future__ import annotations

import random
import time

import torch

from drafting.bench.identity import TIE_MARGIN  # the bench's near-tie rule: a flip where `ar`'s top-2 gap is this small
from drafting.machine.cost_curve import measure
from drafting.engine.decode import Decoder
from drafting.engine.hooks import RecordMargins
from drafting.machine.step_hooks import machine_hooks
from drafting.engine.hf.kv_cache import new_cache
from drafting.speculators import create
from drafting.engine.tree import Draft, DraftTree
from drafting.engine.hf.forward import HFForward

FP32_ATOL = 1e-3  # tree vs sequential logits in float32 (kernels differ between row counts, the maths does not)


def _random_tree(rng: random.Random, root: int, size: int, vocab: int) -> DraftTree:
    tree = DraftTree(root)
    while len(tree) < size:
        tree.add(rng.randrange(2, vocab - 1), rng.randrange(len(tree)), "probe")
    return tree


@torch.inference_mode()
def _sequential_last(lm, ids: list[int]) -> torch.Tensor:
    x = torch.tensor([ids], device=lm.device)
    pos = torch.arange(len(ids), device=lm.device)[None]
    return lm.model(input_ids=x, position_ids=pos).logits[0, -1].float()


def tree_logits(lm, seeds: int, max_nodes: int) -> dict:
    """Every node of random trees scored in one pass against a fresh sequential pass over its path."""
    exact = lm.dtype == torch.float32
    fwd = HFForward(lm.model, lm.dtype, lm.device)
    vocab = lm.vocab_size
    worst, nodes, flips, untied_flips, decisive = 0.0, 0, 0, 0, 0
    for seed in range(seeds):
        rng = random.Random(seed)
        prefix = [rng.randrange(2, vocab - 1) for _ in range(rng.randrange(8, 96))]
        cache = new_cache(lm.model.config)
        fwd.prefill(prefix[:-1], cache)
        tree = _random_tree(rng, prefix[-1], rng.randrange(max_nodes // 2, max_nodes + 1), vocab)
        logits = fwd.step(Draft(tree=tree), cache).float()
        for node in range(len(tree)):
            expect = _sequential_last(lm, prefix[:-1] + [tree.tokens[i] for i in tree.path_to(node)])
            worst = max(worst, float((logits[node] - expect).abs().max()))
            nodes += 1
            top2 = expect.topk(2).values
            untied = float(top2[0] - top2[1]) > TIE_MARGIN
            decisive += untied
            if int(logits[node].argmax()) != int(expect.argmax()):
                flips += 1
                untied_flips += untied
    ok = worst <= FP32_ATOL if exact else untied_flips == 0
    return {
        "name": "tree logits", "setting": f"{_dt(lm)}, {seeds} trees <= {max_nodes} nodes",
        "figures": (f"max |diff| {worst:.2e} over {nodes} nodes ({decisive} not near a tie); argmax flips {flips} "
                    f"({untied_flips} not at a tie)"),
        "ok": ok, "max_abs_diff": worst, "nodes": nodes, "nodes_not_near_tie": decisive, "argmax_flips": flips,
        "flips_not_at_tie": untied_flips,
    }


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
    exact = lm.dtype == torch.float32
    ar = Decoder(lm, create("ar"), hooks=[*machine_hooks(), RecordMargins()])
    refs = [ar.generate(p, new_tokens) for p in prompts]
    per_spec, ok = {}, True
    for spec in specs:
        dec = Decoder(lm, create(spec), hooks=machine_hooks())
        identical = ties = 0
        accepted, margins = [], []
        for p, ref in zip(prompts, refs):
            res = dec.generate(p, new_tokens)
            accepted.append(res.mean_accepted)
            div = next((i for i, (a, b) in enumerate(zip(ref.output_ids, res.output_ids)) if a != b), None)
            if div is None and len(ref.output_ids) != len(res.output_ids):
                div = min(len(ref.output_ids), len(res.output_ids))
            if div is None:
                identical += 1
            else:
                margin = ref.margins[div] if div < len(ref.margins) else None
                margins.append(margin)
                ties += int(not exact and margin is not None and margin <= TIE_MARGIN)
        good = identical == len(prompts) if exact else identical + ties == len(prompts)
        ok = ok and good
        per_spec[spec] = {"identical": identical, "at_ties": ties, "divergence_margins": margins,
                          "mean_accepted": sum(accepted) / len(accepted)}
    figures = ", ".join(f"{s} {v['identical']}/{len(prompts)}" + (f"+{v['at_ties']} tie" if v["at_ties"] else "")
                        for s, v in per_spec.items())
    figures += f"; mean accepted {max(v['mean_accepted'] for v in per_spec.values()):.2f} at best"
    return {"name": "greedy identity", "setting": f"{_dt(lm)}, {len(prompts)} prompts x {new_tokens} tokens",
            "figures": figures, "ok": ok, "speculators": per_spec}


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
    ms = [1000 * s for s in curve.seconds]
    rel = [s / curve.seconds[0] for s in curve.seconds]
    flat = max((n for n, r in zip(curve.sizes, rel) if r <= 1.5), default=1)
    ok = all(s > 0 for s in curve.seconds)
    return {
        "name": "doctor", "setting": f"{lm.name}, {prefix} cached",
        "figures": (f"1 row {ms[0]:.2f} ms ({1000 / ms[0]:.0f} tok/s), {sizes[-1]} rows {rel[-1]:.2f}x; "
                    f"<= 1.5x up to {flat} rows; prefill {prefix / best:.0f} tok/s"),
        "ok": ok, "sizes": list(curve.sizes), "ms": ms, "relative": rel, "prefill_tokens_per_s": prefix / best,
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
    """Phases add up: draft + verify + prefill never exceed a run's wall time, forwards never exceed it."""
    worst = 0.0
    for r in runs:
        parts = r["draft_s"] + r["verify_s"] + r["prefill_s"]
        worst = max(worst, parts / r["wall_s"] if r["wall_s"] else 0.0,
                    r["forward_s"] / r["wall_s"] if r["wall_s"] and not r.get("external") else 0.0)
    ok = worst <= 1.02
    figures = f"largest (phases or forwards) / wall {worst:.3f}"
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
