"""goose from Python: ``generate`` returns a whole answer, ``stream`` yields it piece by piece as steps are
accepted. Both take a prompt string or a list of chat messages and any model ``goose --model`` takes, or a
transformers model object the caller already has (left as it was found, see drafting.models.borrowed).

Models goose loads are kept for the life of the process, one per (model, device, dtype, weights), together
with one decoder per speculator spec, so a loop of calls loads once and the speculators' learned tables stay
warm from call to call. A call with a ``seed`` runs a fresh speculator, so the same seed gives the same text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

from drafting.engine.trace import StepRecord, source_counts
from drafting.speculators import DEFAULT_SPECULATOR


_MODELS: dict = {}  # (model, device, dtype, weights) -> LoadedModel
_DECODERS: dict = {}  # (model key, speculator spec) -> Decoder


@dataclass
class Generation:
    """One answer: its text, its token ids (an EOS included when it ended on one), why it stopped
    (``eos``, ``stop`` for a stop string, ``max_new_tokens`` or ``context``) and what the run measured."""

    text: str
    token_ids: list[int]
    stop_reason: str
    stats: dict
    prompt_ids: list[int] = field(default_factory=list, repr=False)
    records: list[StepRecord] = field(default_factory=list, repr=False)


class Piece(NamedTuple):
    """What ``stream`` yields: the text one step added (may be empty) and that step's record."""

    text: str
    record: StepRecord


def embedded_model_folder() -> str:
    """The embedded model as a plain transformers folder (converted once from its GGUF into goose's cache), for
    ``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained``."""
    from drafting.models.gguf_convert import ensure_converted
    from drafting.models.loader import _quiet_transformers, embedded_gguf

    _quiet_transformers()
    return str(ensure_converted(embedded_gguf()))


def forget_models() -> None:
    """Drop every model and decoder this process keeps (frees their memory)."""
    _MODELS.clear()
    _DECODERS.clear()


def generate(prompt, *, model=None, tokenizer=None, speculator: str = DEFAULT_SPECULATOR, max_new_tokens: int = 128,
             temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None, stop=None,
             chat: bool = True, device: str = "auto", dtype: str = "auto", weights: str = "auto") -> Generation:
    """Generate an answer to ``prompt`` through ``speculator``; greedy at temperature 0 (token-identical to
    plain decoding), else sampled from exactly the warped target distribution. See docs/python.md."""
    s = stream(prompt, model=model, tokenizer=tokenizer, speculator=speculator, max_new_tokens=max_new_tokens,
               temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, stop=stop, chat=chat, device=device,
               dtype=dtype, weights=weights)
    for _ in s:
        pass
    return s.generation


def stream(prompt, *, model=None, tokenizer=None, speculator: str = DEFAULT_SPECULATOR, max_new_tokens: int = 128,
           temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None, stop=None,
           chat: bool = True, device: str = "auto", dtype: str = "auto", weights: str = "auto") -> "Stream":
    """Like ``generate``, but returns a ``Stream``: iterate it for ``Piece(text, record)`` as each step is
    accepted; its ``generation`` is the whole answer once the iteration ends."""
    stops = _check_options(max_new_tokens, temperature, top_k, top_p, seed, stop)
    lm, key = _model(model, tokenizer, device, dtype, weights)
    prompt_ids = _encode(lm.tokenizer, prompt, chat)
    if getattr(lm, "borrowed", False):
        from drafting.models.borrowed import borrowed

        with borrowed(lm.model):  # a tree speculator may time the model's forward passes as it will run
            decoder = _decoder(lm, key, speculator, fresh=True)
    else:
        decoder = _decoder(lm, key, speculator, fresh=seed is not None)
    from drafting.engine.acceptance import make_acceptor
    from drafting.engine.sampling import SamplingParams

    acceptor = make_acceptor(SamplingParams(temperature, top_k, top_p, seed))  # this call's own, not the decoder's
    decoder.check_fits(prompt_ids)  # ContextError (one sentence) before anything runs
    return Stream(lm, decoder, prompt_ids, max_new_tokens, stops, acceptor)


class Stream:
    """An answer being generated: iterate for pieces; ``generation`` once done (or after ``close``)."""

    def __init__(self, lm, decoder, prompt_ids: list[int], max_new_tokens: int, stops: list[str], acceptor):
        self.lm = lm
        self.generation: Generation | None = None
        self._it = self._run(decoder, prompt_ids, max_new_tokens, stops, acceptor)

    def __iter__(self) -> Iterator[Piece]:
        return self

    def __next__(self) -> Piece:
        return next(self._it)

    def close(self) -> None:
        self._it.close()

    def _run(self, decoder, prompt_ids, max_new_tokens, stops, acceptor) -> Iterator[Piece]:
        from contextlib import nullcontext

        from drafting.models.detokenize import Detokenizer
        from drafting.models.borrowed import borrowed

        lm = self.lm
        detok = Detokenizer(lm.tokenizer, lm.eos_ids)
        out: list[int] = []
        records: list[StepRecord] = []
        reason = ""
        steps = decoder.run(prompt_ids, max_new_tokens, acceptor=acceptor)
        result = steps.result
        guard = borrowed(lm.model) if getattr(lm, "borrowed", False) else nullcontext()
        try:
            with guard:
                for record in steps:
                    records.append(record)
                    text = []
                    for token in record.emitted:
                        out.append(token)
                        before = len(detok.text)
                        piece = detok.push(token)
                        text.append(piece)
                        if piece and _stop_hit(detok.text, before, stops):
                            reason = "stop"
                            break
                    if reason:
                        steps.close()
                    yield Piece("".join(text), record)
                    if reason:
                        break
                tail = detok.flush()
                if tail and records:
                    yield Piece(tail, records[-1])
        finally:
            steps.close()
            self.generation = Generation(
                text=detok.text, token_ids=out, stop_reason=reason or (result.stop_reason if result else ""),
                stats=_stats(result, records, len(out)), prompt_ids=list(prompt_ids), records=records,
            )


def _stop_hit(text: str, before: int, stops: list[str]) -> bool:
    """A stop string ends inside the text the last token released (transformers' stop_strings rule)."""
    return any(s in text[max(0, before - len(s) + 1):] for s in stops)


def _stats(result, records: list[StepRecord], tokens: int) -> dict:
    acceptance = source_counts(records)
    for a in acceptance.values():
        a["rate"] = a["accepted"] / a["offered"] if a["offered"] else 0.0
    wall = result.wall_s if result else 0.0
    prefill = result.prefill_s if result else 0.0
    decode_s = max(0.0, wall - prefill)
    return {
        "tokens": tokens,
        "tokens_per_s": tokens / decode_s if decode_s > 0 else 0.0,  # decoding speed, prefill excluded
        "steps": len(records),
        "mean_accepted": tokens / len(records) if records else 0.0,
        "prefill_s": prefill,
        "wall_s": wall,
        "draft_s": sum(r.draft_s for r in records),
        "verify_s": sum(r.verify_s for r in records),
        "acceptance": acceptance,
    }


def _check_options(max_new_tokens, temperature, top_k, top_p, seed, stop) -> list[str]:
    from drafting.engine.sampling import MIN_TEMPERATURE, SEED_LIMIT

    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be a positive whole number of tokens, not {max_new_tokens!r}.")
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be 0 (greedy) or a positive finite number, not {temperature!r}.")
    if 0 < temperature < MIN_TEMPERATURE:
        raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, where logits / temperature "
                         f"still fit in float32, not {temperature!r}.")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be 0 (off) or a positive whole number of tokens, not {top_k!r}.")
    if not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be a number in (0, 1], not {top_p!r}.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT):
        raise ValueError(f"seed must be None or a whole number from 0 to 2**64 - 1, not {seed!r}.")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if not all(isinstance(s, str) and s for s in stops):
        raise ValueError("stop must be a string or a list of non-empty strings.")
    return stops


def _model(model, tokenizer, device: str, dtype: str, weights: str):
    from drafting.models.borrowed import is_model_object, wrap_model

    if is_model_object(model):
        if tokenizer is None:
            raise ValueError("A model object needs its tokenizer too: pass tokenizer=... with it.")
        if (device, dtype, weights) != ("auto", "auto", "auto"):
            raise ValueError("device, dtype and weights apply to models goose loads; a model object is used as it is.")
        lm = wrap_model(model, tokenizer)
        lm.borrowed = True  # attention is switched only while a stream runs
        return lm, None
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be None, a name, a path or a transformers model object, not {type(model).__name__}.")
    if tokenizer is not None:
        raise ValueError("tokenizer= goes with a model object; a model goose loads brings its own tokenizer.")
    key = (model, device, dtype, weights)
    if key not in _MODELS:
        from drafting.models.loader import load_model

        _MODELS[key] = load_model(model, device=device, dtype=dtype, weights=weights)
    return _MODELS[key], key


def _decoder(lm, key, speculator: str, fresh: bool):
    from drafting.engine.decode import Decoder
    from drafting.machine.step_hooks import machine_hooks
    from drafting.speculators import create

    if not isinstance(speculator, str):
        raise ValueError(f"speculator must be a spec string such as 'goose' or 'pld:draft=8', not {speculator!r}.")
    spec = create(speculator)  # SpecError, one sentence, for an unknown name or option
    if key is None or fresh:
        return Decoder(lm, spec, hooks=machine_hooks())  # UnsupportedModelError for a tree speculator on a sliding-window model
    dkey = (key, spec.spec())
    if dkey not in _DECODERS:
        _DECODERS[dkey] = Decoder(lm, spec, hooks=machine_hooks())
    return _DECODERS[dkey]


def _encode(tokenizer, prompt, chat: bool) -> list[int]:
    from drafting.models.chat_template import encode

    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("The prompt is empty.")
        messages = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, (list, tuple)) and prompt and all(
            isinstance(m, dict) and isinstance(m.get("content"), str) and "role" in m for m in prompt):
        if not any(m["content"].strip() for m in prompt):
            raise ValueError("The prompt is empty: every message has empty content.")
        messages = list(prompt)
    elif isinstance(prompt, (list, tuple)) and not prompt:
        raise ValueError("The prompt is empty: the message list has no messages.")
    else:
        raise ValueError("prompt must be a string or a list of chat messages like {'role': 'user', 'content': '...'}.")
    if not chat:
        ids = tokenizer("\n".join(m["content"] for m in messages), add_special_tokens=True)["input_ids"]
        return [int(t) for t in ids]
    return encode(tokenizer, messages)
