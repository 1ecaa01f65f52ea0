"""Step 4 of the GPU check: the static-shapes option (drafting.engine.hf.static_shapes) decodes what the dynamic
path decodes, and what it costs per step; on CUDA with the compiled (CUDA-graph) step.

Outputs are judged as every identity row judges them (gpu_checks.identity_verdict), against the dynamic path's
output for the same speculator. The timed loop measures steady state only: every bucket is compiled and its
graph captured first, the cost curve that goose's budget reads is measured first, neither decoder carries the
cost-curve watch (it would measure the curve again in the middle of a timed run, since static steps cost what
the dynamic curve does not say), each run is synchronised at both ends, and any compilation that still happens
while timing fails the row.
"""

from __future__ import annotations

import time

import torch

from drafting.engine.decode import Decoder
from drafting.engine.hf.static_shapes import StaticShapes
from drafting.engine.tree import Draft, DraftTree
from drafting.speculators import create
from gpu_checks import identity_figures, identity_verdict, reference

# few buckets (each compiles once) and a cache as long as these prompts need, not the whole 8k context
BUCKETS = (1, 16, 64)
CONTEXT = 1024
REPLAYS = 3  # reduce-overhead runs a new shape once, records its CUDA graph on the next call, replays after


def static_identity(lm, specs: list[str], prompts: list[list[int]], new_tokens: int, compile: bool) -> dict:
    """``prompts[0]`` warms every decoder up; the others are timed and compared."""
    shapes = StaticShapes(buckets=BUCKETS, compile=compile, context=CONTEXT)
    warm, timed = prompts[0], prompts[1:]
    lm.verify_cost()  # goose's tree budget reads it: measured (or read from the cache) now, not while timed
    decoders = {s: (Decoder(lm, create(s)), Decoder(lm, create(s), static_shapes=shapes)) for s in specs}
    for plain, static in decoders.values():  # both see the warm-up prompt, so their speculators' memories match
        plain.generate(warm, new_tokens)
        static.generate(warm, new_tokens)
    warm_buckets(next(iter(decoders.values()))[1].forward, shapes, warm, lm)  # one forward, shared by all
    compiled_before = compiles()
    pairs, per_spec = {}, {}
    for spec, (plain, static) in decoders.items():
        walls, tokens, pairs[spec] = {"dynamic": 0.0, "static": 0.0}, 0, []
        for ids in timed:
            a, walls["dynamic"] = _timed(plain, ids, new_tokens, lm, walls["dynamic"])
            b, walls["static"] = _timed(static, ids, new_tokens, lm, walls["static"])
            pairs[spec].append((reference(lm, ids, a), b))
            tokens += len(a)
        per_spec[spec] = {"tokens": tokens, "dynamic_tokens_per_s": tokens / walls["dynamic"],
                          "static_tokens_per_s": tokens / walls["static"]}
    compiled_while_timed = compiles() - compiled_before
    v = identity_verdict(pairs, lm.dtype, exact=False)
    for spec, s in v["speculators"].items():
        s.update(per_spec[spec])
    speeds = "; ".join(f"{s} {t['dynamic_tokens_per_s']:.0f} -> {t['static_tokens_per_s']:.0f} tok/s"
                       for s, t in per_spec.items())
    figures = f"vs dynamic: {identity_figures(v)}; {speeds}"
    if compiled_while_timed:
        figures += f"; {compiled_while_timed} COMPILATIONS WHILE TIMED"
    mode = "compiled (reduce-overhead)" if compile else "eager"
    return {"name": "static shapes", "setting": f"{lm.name}, {mode}, buckets {list(shapes.buckets)}",
            "figures": figures, "ok": v["ok"] and compiled_while_timed == 0,
            "compilations_while_timed": compiled_while_timed,
            **{k: v[k] for k in ("speculators", "reference_tokens", "beyond_tie", "reference_unexplained")}}


def warm_buckets(fwd, shapes: StaticShapes, ids: list[int], lm) -> None:
    """Run a step of every bucket's size REPLAYS times, so each is compiled and captured before any timing."""
    cache = fwd.new_cache()
    fwd.prefill(ids[:-1], cache)
    prefix = len(ids) - 1
    for rows in shapes.buckets:
        tree = DraftTree(ids[-1])
        for k in range(rows - 1):  # a star: the 4-D mask path trees take
            tree.add(ids[k % len(ids)], 0, "probe")
        for _ in range(REPLAYS):
            fwd.step(Draft(tree=tree), cache)
            fwd.crop(cache, prefix)
    _sync(lm)


def _timed(decoder: Decoder, ids: list[int], new_tokens: int, lm, total: float) -> tuple[list[int], float]:
    _sync(lm)
    t0 = time.perf_counter()
    out = decoder.generate(ids, new_tokens).output_ids
    _sync(lm)
    return out, total + time.perf_counter() - t0


def compiles() -> int:
    """Graphs torch.compile has made in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _sync(lm) -> None:
    if lm.device.type == "cuda":
        torch.cuda.synchronize(lm.device)
