"""One speculative method inside vLLM's offline ``LLM``, over a list of prompts, one request at a time: the
output ids, the wall time and vLLM's own spec-decode counters of every prompt.

Each method runs in a process of its own (``python -m scripts.vllm_runs SPEC.json``), so one
engine is shut down whole before the next one starts and a failing method cannot take the others with it.
"""

from __future__ import annotations

import json
import sys
import time

from drafting.models.chat_template import decode, encode
from drafting.integrations.vllm import SettingsError, parse_settings, speculative_config as goose_config

NGRAM_MIN = 2  # ngram:N tunes prompt_lookup_max to N and matches down to bigrams


class MethodError(ValueError):
    """A method name that vLLM cannot run here; one sentence."""


def method_config(method: str, k: int) -> dict | None:
    """vLLM's ``speculative_config`` for a bench method name (None = no speculation)."""
    if method == "none":
        return None
    if method == "goose":
        return goose_config(k)
    if method.startswith("goose:"):
        try:
            parse_settings(method.split(":", 1)[1])
        except SettingsError as exc:
            raise MethodError(str(exc)) from None
        return goose_config(k)
    if method == "suffix":
        return {"method": "suffix", "num_speculative_tokens": k}
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k}
    if method.startswith("ngram:"):
        setting = method.split(":", 1)[1]
        lo, _, hi = setting.partition("-") if "-" in setting else (None, "", setting)
        try:
            hi_n = int(hi)
            lo_n = int(lo) if lo is not None else min(NGRAM_MIN, hi_n)
        except ValueError:
            raise MethodError(f"{method!r} is not ngram:MAX or ngram:MIN-MAX with whole numbers.") from None
        if not 1 <= lo_n <= hi_n:
            raise MethodError(f"{method!r} needs 1 <= MIN <= MAX.")
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": lo_n, "prompt_lookup_max": hi_n}
    raise MethodError(f"Unknown method {method!r}; use none, ngram, ngram:MAX, ngram:MIN-MAX, suffix, goose or "
                      "goose:SETTINGS.")


def unavailable(method: str) -> str | None:
    """Why ``method`` cannot run in this environment, or None."""
    if method == "suffix":
        try:
            import arctic_inference.suffix_decoding  # noqa: F401
        except ImportError as exc:
            return f"suffix needs the package arctic-inference, which is not importable here ({exc})."
    return None


def _spec_counters(llm) -> dict[str, float]:
    """vLLM's cumulative spec-decode counters (drafts, draft tokens, accepted tokens)."""
    out = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    for metric in llm.get_metrics():
        key = names.get(metric.name)
        if key is not None:
            out[key] += float(getattr(metric, "value", 0) or 0)
    return out


# On CPU vLLM reserves this share of the machine's memory for weights and KV cache; its default (0.92) refuses
# to start when other processes or the page cache hold more than 8% of the memory.
MEMORY_SHARE = 0.5


def run_method(spec: dict) -> list[dict]:
    """``spec``: method, model, k, max_new_tokens, max_model_len, prompts [{id, turns}], out (JSON lines)."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    config = method_config(spec["method"], int(spec["k"]))
    llm = LLM(model=spec["model"], dtype="float32", enforce_eager=True, max_model_len=int(spec["max_model_len"]),
              speculative_config=config, disable_log_stats=False, seed=0, gpu_memory_utilization=MEMORY_SHARE)
    tokenizer = llm.get_tokenizer()
    eos = {int(t) for t in [getattr(tokenizer, "eos_token_id", None)] if t is not None}
    params = SamplingParams(temperature=0.0, max_tokens=int(spec["max_new_tokens"]))
    llm.generate([TokensPrompt(prompt_token_ids=encode(tokenizer, [{"role": "user", "content": "Hello"}]))],
                 SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)  # warm-up, not timed
    rows = []
    with open(spec["out"], "a", encoding="utf-8") as fh:
        for prompt in spec["prompts"]:
            before = _spec_counters(llm)
            messages: list[dict] = []
            output: list[int] = []
            prompt_tokens = 0
            wall = 0.0
            for turn in prompt["turns"]:
                messages.append({"role": "user", "content": turn})
                ids = encode(tokenizer, messages)
                if len(ids) + int(spec["max_new_tokens"]) > int(spec["max_model_len"]):
                    break  # the turn would not fit the context; what came before still counts
                start = time.perf_counter()
                result = llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)
                wall += time.perf_counter() - start
                got = list(result[0].outputs[0].token_ids)
                output += got
                prompt_tokens += len(ids)
                messages.append({"role": "assistant", "content": decode(tokenizer, got, eos)})
            after = _spec_counters(llm)
            row = {"method": spec["method"], "id": prompt["id"], "prompt_tokens": prompt_tokens,
                   "output_ids": output, "new_tokens": len(output), "wall_s": wall,
                   **{k: after[k] - before[k] for k in after}}
            fh.write(json.dumps(row) + "\n")
            fh.flush()  # each prompt is kept as soon as it is done
            rows.append(row)
    return rows


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        run_method(json.load(fh))
