"""What one verification step costs: building the step inputs (ids, positions, tree mask) alone, and building
them plus one forward over the cache, for 1, 16 and 64 rows after 256 and 1,500 cached tokens; medians of
interleaved repeats. It uses only ``step_inputs`` and ``Forward`` as they were before and after the windowed
tree masks, so it compares two checkouts:

    PYTHONPATH=/path/to/old python scripts/step_bench.py --json old.json
    PYTHONPATH=/path/to/new python scripts/step_bench.py --json new.json --against old.json

``--model`` takes what ``goose --model`` takes (default: the embedded SmolLM2-135M).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

from drafting.engine.hf.kv_cache import new_cache
from drafting.models.loader import load_model
from drafting.engine.tree import Draft, DraftTree
from drafting.engine.hf.step_inputs import step_inputs
from drafting.engine.hf.forward import HFForward, keep_accepted


def tree_of(rows: int, root: int, rng: random.Random) -> DraftTree:
    """A chain of a third of the rows (a context match) with random branches: the shape tree speculators send."""
    tree = DraftTree(root)
    parent = 0
    for _ in range(rows // 3):
        parent = tree.add(rng.randrange(100, 30000), parent, "context")
    while len(tree) < rows:
        tree.add(rng.randrange(100, 30000), rng.randrange(len(tree)), "adjacency")
    return tree


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model to load (default: the embedded model)")
    ap.add_argument("--repeats", type=int, default=30, help="timed repeats per case")
    ap.add_argument("--json", default=None, help="write the medians (seconds) to this file")
    ap.add_argument("--against", default=None, help="a --json file of another checkout to print ratios against")
    args = ap.parse_args()
    lm = load_model(args.model, device="cpu", dtype="float32")
    fwd = HFForward(lm.model, lm.dtype, lm.device)
    layout = getattr(fwd, "layout", None)
    rng = random.Random(0)
    out = {}
    for cached in (256, 1500):
        cache = new_cache(lm.model.config)
        fwd.prefill([rng.randrange(100, 30000) for _ in range(cached)], cache)
        for rows in (1, 16, 64):
            draft = Draft(tree=tree_of(rows, rng.randrange(100, 30000), rng))
            extra = () if layout is None else (layout,)
            inputs, whole = [], []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                step_inputs(draft, cached, lm.dtype, lm.device, *extra)
                t1 = time.perf_counter()
                fwd.step(draft, cache)
                t2 = time.perf_counter()
                keep_accepted(cache, cached, [0])
                inputs.append(t1 - t0)
                whole.append(t2 - t1 + (t1 - t0))
            key = f"{cached} cached, {rows} rows"
            out[key] = {"step_inputs": statistics.median(inputs), "step_inputs+forward": statistics.median(whole)}
    old = json.load(open(args.against)) if args.against else {}
    for key, row in out.items():
        ratio = ""
        if key in old:
            ratio = "  new/old: " + ", ".join(f"{k} {row[k] / old[key][k]:.3f}" for k in row)
        print(f"{key:24s} step_inputs {row['step_inputs'] * 1e6:8.1f} us   step_inputs+forward "
              f"{row['step_inputs+forward'] * 1e3:8.2f} ms{ratio}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
