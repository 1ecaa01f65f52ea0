"""What one vLLM engine step costs, by batch size and draft tokens per request: the numbers the step budget
(drafting/integrations/batch_budget.py) fits online, measured in a controlled way.

    .venv-vllm/bin/python -m scripts.vllm_step_cost [--model M] [--batch 1,4,16] [--drafts 0,1,2,4,8]
        [--steps 40] [--json OUT]

For each batch size B, B requests decode together with no speculation (one engine), then with a proposer that
drafts exactly n tokens per request and step (a second engine; the drafts repeat the request's last token, so
they are nearly always rejected and every step verifies B * (1 + n) tokens). Each step of the decoding phase is
timed (prefill and the first steps left out); the median is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from drafting.api import embedded_model_folder
from scripts.vllm_runs import make_engine

DRAFTS_FILE_ENV = "GOOSE_STEP_COST_DRAFTS"  # the file the proposer reads n from (it runs in vLLM's engine process)
SKIP_STEPS = 3  # the first steps of a batch: prefill and warm-up


class FixedDrafts:
    """A vLLM ``custom_class`` proposer that drafts n copies of each request's last token (n read from a file)."""

    def __init__(self, vllm_config=None):
        self.path = os.environ[DRAFTS_FILE_ENV]
        self.max_model_len = vllm_config.model_config.max_model_len

    def load_model(self, *args, **kwargs) -> None:
        return None

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None, **_unused):
        n = int(Path(self.path).read_text() or 0)
        out = []
        for i, sampled in enumerate(sampled_token_ids):
            length = int(num_tokens_no_spec[i])
            room = min(n, self.max_model_len - length - 1)
            out.append([int(token_ids_cpu[i, length - 1])] * room if sampled and room > 0 else [])
        return out


def time_steps(llm, prompts: list[list[int]], steps: int) -> list[float]:
    """Seconds of each engine step while ``prompts`` decode together (ignoring end of sequence)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    engine = llm.llm_engine
    params = SamplingParams(temperature=0.0, max_tokens=steps, ignore_eos=True)
    for j, ids in enumerate(prompts):
        engine.add_request(f"probe-{time.monotonic_ns()}-{j}", TokensPrompt(prompt_token_ids=ids), params)
    times = []
    while engine.has_unfinished_requests():
        start = time.perf_counter()
        outs = engine.step()
        times.append(time.perf_counter() - start)
        if any(o.finished for o in outs):
            break  # the batch shrinks from here on
    while engine.has_unfinished_requests():
        engine.step()
    return times[SKIP_STEPS:]


def probe(model: str, batches: list[int], drafts: list[int], steps: int, drafts_file: Path) -> list[dict]:
    from drafting.models.chat_template import encode

    rows = []
    for spec in (None, "fixed"):
        config = None if spec is None else {"method": "custom_class", "model": "scripts.vllm_step_cost.FixedDrafts",
                                               "num_speculative_tokens": max(drafts)}
        drafts_file.write_text("0")
        llm = make_engine(model, config, 2048, max(batches))
        tokenizer = llm.get_tokenizer()
        prompts = [encode(tokenizer, [{"role": "user", "content": f"Count from {j} to {j + 50}, one per line."}])
                   for j in range(max(batches))]
        time_steps(llm, prompts[:1], 8)  # warm-up
        for b in batches:
            for n in ([0] if spec is None else drafts):
                drafts_file.write_text(str(n))
                times = time_steps(llm, prompts[:b], steps)
                row = {"speculation": spec is not None, "batch": b, "drafts": n, "verified": b * (1 + n),
                       "median_ms": 1e3 * statistics.median(times), "steps": len(times)}
                rows.append(row)
                print(json.dumps(row), flush=True)
        del llm
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.vllm_step_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model folder or hub id (default: the embedded model's converted folder)")
    ap.add_argument("--batch", default="1,4,16", help="comma-separated batch sizes")
    ap.add_argument("--drafts", default="0,1,2,4,8", help="comma-separated draft tokens per request and step")
    ap.add_argument("--steps", type=int, default=40, help="decoding steps timed per setting")
    ap.add_argument("--json", dest="json_out", help="write the rows to this JSON file")
    args = ap.parse_args(argv)
    try:
        batches = [int(x) for x in args.batch.split(",")]
        drafts = [int(x) for x in args.drafts.split(",")]
    except ValueError:
        print("error: --batch and --drafts take comma-separated whole numbers.", file=sys.stderr)
        return 2
    if min(batches) < 1 or min(drafts) < 0 or args.steps <= SKIP_STEPS + 1:
        print(f"error: batch sizes must be at least 1, drafts at least 0 and --steps above {SKIP_STEPS + 1}.",
              file=sys.stderr)
        return 2
    # the engine core in this process, as vllm_bench runs it (a process of its own busy-waits on a shared core)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with tempfile.TemporaryDirectory(prefix="goose-step-cost-") as tmp:
        drafts_file = Path(os.environ.setdefault(DRAFTS_FILE_ENV, str(Path(tmp) / "drafts")))
        rows = probe(args.model or embedded_model_folder(), batches, drafts, args.steps, drafts_file)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
