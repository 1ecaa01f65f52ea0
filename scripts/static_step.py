"""Step 4 of the GPU check: the static-shapes option (drafting.engine.hf.static_shapes) decodes exactly what the dynamic
path decodes, and what it costs per step; on CUDA with the compiled (CUDA-graph) step."""

from __future__ import annotations

import time


from drafting.engine.decode import Decoder
from drafting.machine.step_hooks import machine_hooks
from drafting.speculators import create
from drafting.engine.hf.static_shapes import StaticShapes


def static_identity(lm, specs: list[str], prompts: list[list[int]], new_tokens: int, compile: bool) -> dict:
    # few buckets (each compiles once) and a cache as long as these prompts need, not the whole 8k context
    shapes = StaticShapes(buckets=(1, 16, 64), compile=compile, context=1024)
    per_spec, ok = {}, True
    for spec in specs:
        plain = Decoder(lm, create(spec), hooks=machine_hooks())
        static = Decoder(lm, create(spec), static_shapes=shapes, hooks=machine_hooks())
        static.generate(prompts[0], new_tokens)  # warm-up: compiles and captures the shapes this prompt needs
        same, walls = 0, {"dynamic": 0.0, "static": 0.0}
        tokens = 0
        for ids in prompts:
            t0 = time.perf_counter()
            a = plain.generate(ids, new_tokens)
            t1 = time.perf_counter()
            b = static.generate(ids, new_tokens)
            walls["dynamic"] += t1 - t0
            walls["static"] += time.perf_counter() - t1
            same += a.output_ids == b.output_ids
            tokens += len(a.output_ids)
        ok = ok and same == len(prompts)
        per_spec[spec] = {"identical": same, "tokens": tokens, "dynamic_tokens_per_s": tokens / walls["dynamic"],
                          "static_tokens_per_s": tokens / walls["static"]}
    mode = "compiled (reduce-overhead)" if compile else "eager"
    figures = "; ".join(f"{s} {v['identical']}/{len(prompts)} same, {v['dynamic_tokens_per_s']:.0f} -> "
                        f"{v['static_tokens_per_s']:.0f} tok/s" for s, v in per_spec.items())
    dt = str(lm.dtype).replace("torch.", "")
    return {"name": "static shapes", "setting": f"{lm.name}, {dt}, {mode}, buckets {list(shapes.buckets)}",
            "figures": figures, "ok": ok, "speculators": per_spec}
