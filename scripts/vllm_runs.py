"""One speculative method inside vLLM's offline ``LLM``, over a list of prompts, with a given number of
conversations in flight: the output ids and times of every prompt, and the whole run's wall time and vLLM's own
spec-decode counters.

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


class Conversation:
    """One prompt's turns, submitted one after another; what it produced and how long each turn took."""

    def __init__(self, prompt: dict):
        self.id = prompt["id"]
        self.turns = list(prompt["turns"])
        self.messages: list[dict] = []
        self.output: list[int] = []
        self.prompt_tokens = 0
        self.wall = 0.0  # seconds its turns were in the engine
        self.tpots: list[float] = []  # per turn: seconds per output token after the first
        self.turn_ids: list[tuple[list[int], list[int]]] = []  # per turn: its prompt ids and output ids (replays)
        self.turn = 0
        self.current: list[int] = []
        self.current_prompt: list[int] = []
        self.submitted = self.first_token = 0.0

    def next_prompt(self, tokenizer, max_new_tokens: int, max_model_len: int) -> list[int] | None:
        """The ids of its next turn, or None when it is done (no turn left, or the next would not fit)."""
        if self.turn >= len(self.turns):
            return None
        self.messages.append({"role": "user", "content": self.turns[self.turn]})
        ids = encode(tokenizer, self.messages)
        if len(ids) + max_new_tokens > max_model_len:
            return None  # the turn would not fit the context; what came before still counts
        self.prompt_tokens += len(ids)
        self.turn += 1
        self.current = []
        self.current_prompt = ids
        return ids


def serve(llm, prompts: list[dict], params, concurrency: int, max_new_tokens: int, max_model_len: int,
          tokenizer, eos: set[int]) -> tuple[list[Conversation], float]:
    """Closed-loop load: ``concurrency`` conversations in flight in vLLM's engine (the step loop LLM.generate
    runs); when a turn finishes, the conversation's next turn (or the next prompt) is submitted at once.
    Returns the conversations in prompt order and the wall time from the first submission to the last token."""
    from vllm.inputs import TokensPrompt

    engine = llm.llm_engine
    waiting = [Conversation(p) for p in prompts]
    done: list[Conversation] = list(waiting)
    waiting.reverse()
    active: dict[str, Conversation] = {}

    def submit(conv: Conversation) -> bool:
        ids = conv.next_prompt(tokenizer, max_new_tokens, max_model_len)
        if ids is None:
            return False
        rid = f"{conv.id}#{conv.turn}"
        engine.add_request(rid, TokensPrompt(prompt_token_ids=ids), params)
        active[rid] = conv
        conv.submitted, conv.first_token = time.perf_counter(), 0.0
        return True

    def fill() -> None:
        while waiting and len(active) < concurrency:
            submit(waiting.pop())

    start = time.perf_counter()
    fill()
    while engine.has_unfinished_requests():
        outputs = engine.step()
        now = time.perf_counter()
        for out in outputs:
            conv = active.get(out.request_id)
            if conv is None:
                continue
            new = list(out.outputs[0].token_ids)  # DELTA: this step's tokens
            if new and not conv.first_token:
                conv.first_token = now
            conv.current += new
            if not out.finished:
                continue
            del active[out.request_id]
            got = conv.current
            conv.output += got
            conv.turn_ids.append((conv.current_prompt, got))
            conv.wall += now - conv.submitted
            if len(got) > 1:
                conv.tpots.append((now - conv.first_token) / (len(got) - 1))
            conv.messages.append({"role": "assistant", "content": decode(tokenizer, got, eos)})
            if not submit(conv):
                fill()
    return done, time.perf_counter() - start


def make_engine(model: str, speculative_config: dict | None, max_model_len: int, max_num_seqs: int, **kwargs):
    """vLLM's offline engine as every measurement here builds it: float32 (greedy outputs exact), eager, seed 0,
    MEMORY_SHARE of the memory; ``kwargs`` go to ``LLM``."""
    from vllm import LLM

    return LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=max_model_len,
               speculative_config=speculative_config, seed=0, gpu_memory_utilization=MEMORY_SHARE,
               max_num_seqs=max_num_seqs, **kwargs)


def run_method(spec: dict) -> list[dict]:
    """``spec``: method, model, k, max_new_tokens, max_model_len, concurrency, prompts [{id, turns}], out (JSON
    lines: one row per prompt, then one ``load`` row with the whole run's wall time and counters)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    concurrency = int(spec.get("concurrency", 1))
    config = method_config(spec["method"], int(spec["k"]))
    llm = make_engine(spec["model"], config, int(spec["max_model_len"]), max(concurrency, 1), disable_log_stats=False)
    tokenizer = llm.get_tokenizer()
    eos = {int(t) for t in [getattr(tokenizer, "eos_token_id", None)] if t is not None}
    hello = encode(tokenizer, [{"role": "user", "content": "Hello"}])
    llm.generate([TokensPrompt(prompt_token_ids=hello)] * concurrency, SamplingParams(temperature=0.0, max_tokens=8),
                 use_tqdm=False)  # warm-up at the batch size measured, not timed
    params = SamplingParams(temperature=0.0, max_tokens=int(spec["max_new_tokens"]),
                            output_kind=RequestOutputKind.DELTA)
    before = _spec_counters(llm)
    convs, wall = serve(llm, spec["prompts"], params, concurrency, int(spec["max_new_tokens"]),
                        int(spec["max_model_len"]), tokenizer, eos)
    after = _spec_counters(llm)
    rows = [{"method": spec["method"], "concurrency": concurrency, "id": c.id, "prompt_tokens": c.prompt_tokens,
             "output_ids": c.output, "new_tokens": len(c.output), "wall_s": c.wall, "tpot_s": c.tpots,
             "turn_ids": c.turn_ids}
            for c in convs]
    load = {"load": {"method": spec["method"], "concurrency": concurrency, "wall_s": wall,
                     "new_tokens": sum(r["new_tokens"] for r in rows), **{k: after[k] - before[k] for k in after}}}
    with open(spec["out"], "a", encoding="utf-8") as fh:
        for row in rows + [load]:
            fh.write(json.dumps(row) + "\n")
    return rows


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        run_method(json.load(fh))
