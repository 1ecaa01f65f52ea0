"""goose from Python: ``generate`` returns a whole answer, ``stream`` yields it piece by piece as steps are
accepted. Both take a prompt string or a list of chat messages and any model ``goose --model`` takes, or a
transformers model object the caller already has (left as it was found, see drafting.models.borrowed).

Models goose loads are kept for the life of the process, one per (model, device, dtype, weights, engine), together
with one decoder per speculator spec, so a loop of calls loads once and the speculators' learned tables stay
warm from call to call. A call with a ``seed`` runs a fresh speculator, so the same seed gives the same text,
and so does a call made while the kept decoder is still serving an open stream: no two generations share a
speculator's state. Threads may call in at once: one step runs on a model at a time (``_model_lock``).
"""

from __future__ import annotations

import threading
import weakref
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

from drafting.engine.trace import StepRecord, source_counts
from drafting.speculators import DEFAULT_SPECULATOR


_MODELS: dict = {}  # (model, device, dtype, weights, engine) -> LoadedModel
_DECODERS: dict = {}  # (model key, speculator spec) -> Decoder
_CLAIMS: dict = {}  # (model key, speculator spec) -> weak reference to the state of the stream using that decoder
# held while the tables above (and the two below) change, never while a model runs; re-entrant, since the garbage
# collector may end a dropped stream (which gives its borrowed model back) inside a block that holds it
_TABLES = threading.RLock()
_MODEL_LOCKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # network -> its RLock
_BORROWS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # caller's network -> [streams, its restore]


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
    """Drop every model and decoder this process keeps (frees their memory once no open stream uses them)."""
    with _TABLES:
        _MODELS.clear()
        _DECODERS.clear()
        _CLAIMS.clear()


def generate(prompt, *, model=None, tokenizer=None, speculator: str = DEFAULT_SPECULATOR, max_new_tokens: int = 128,
             temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None, stop=None,
             chat: bool = True, device: str = "auto", dtype: str = "auto", weights: str = "auto",
             engine: str = "transformers") -> Generation:
    """Generate an answer to ``prompt`` through ``speculator``; greedy at temperature 0 (token-identical to
    plain decoding; on ``engine="llama.cpp"`` up to near-ties), else sampled from exactly the warped target
    distribution. See docs/python.md."""
    s = stream(prompt, model=model, tokenizer=tokenizer, speculator=speculator, max_new_tokens=max_new_tokens,
               temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, stop=stop, chat=chat, device=device,
               dtype=dtype, weights=weights, engine=engine)
    for _ in s:
        pass
    return s.generation


def stream(prompt, *, model=None, tokenizer=None, speculator: str = DEFAULT_SPECULATOR, max_new_tokens: int = 128,
           temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None, stop=None,
           chat: bool = True, device: str = "auto", dtype: str = "auto", weights: str = "auto",
           engine: str = "transformers") -> "Stream":
    """Like ``generate``, but returns a ``Stream``: iterate it for ``Piece(text, record)`` as each step is
    accepted; its ``generation`` is the whole answer once the iteration ends."""
    stops = _check_options(max_new_tokens, temperature, top_k, top_p, seed, stop)
    lm, key = _model(model, tokenizer, device, dtype, weights, engine)
    prompt_ids = _encode(lm.tokenizer, prompt, chat)
    state = _StreamState()
    # a tree speculator may time the model's forward passes as it will run: on the model's lock, borrowed
    with _model_lock(lm.model), _borrowing(lm):
        decoder = _decoder(lm, key, speculator, fresh=seed is not None, claim=state)
    from drafting.engine.acceptance import make_acceptor
    from drafting.engine.sampling_params import SamplingParams

    acceptor = make_acceptor(SamplingParams(temperature, top_k, top_p, seed))  # this call's own, not the decoder's
    try:
        decoder.check_fits(prompt_ids)  # ContextError (one sentence) before anything runs
    except Exception:
        state.open = False
        raise
    return Stream(lm, decoder, prompt_ids, max_new_tokens, stops, acceptor, state)


class _StreamState:
    """What a stream's generator shares with its ``Stream``: whether it is still open (while it is, and alive, the
    kept decoder it uses is claimed: other calls get a fresh one) and, once it ends, its ``Generation``. Kept apart
    from the ``Stream`` so the generator holds no reference to it: a stream dropped unfinished is freed at once,
    and its claim with it."""

    open = True
    generation: Generation | None = None


class Stream:
    """An answer being generated: iterate for pieces; ``generation`` once done (or after ``close``)."""

    def __init__(self, lm, decoder, prompt_ids: list[int], max_new_tokens: int, stops: list[str], acceptor,
                 state: _StreamState | None = None):
        self.lm = lm
        self._state = state or _StreamState()
        self._it = _run(lm, decoder, prompt_ids, max_new_tokens, stops, acceptor, self._state)

    @property
    def generation(self) -> Generation | None:
        return self._state.generation

    def __iter__(self) -> Iterator[Piece]:
        return self

    def __next__(self) -> Piece:
        return next(self._it)

    def close(self) -> None:
        self._it.close()
        self._state.open = False  # also for a stream never iterated, whose generator never ran its cleanup


def _run(lm, decoder, prompt_ids, max_new_tokens, stops, acceptor, state: _StreamState) -> Iterator[Piece]:
    from drafting.models.detokenize import Detokenizer

    detok = Detokenizer(lm.tokenizer, lm.eos_ids)
    out: list[int] = []
    records: list[StepRecord] = []
    reason = ""
    steps = decoder.run(prompt_ids, max_new_tokens, acceptor=acceptor)
    result = steps.result
    lock = _model_lock(lm.model)
    try:
        with _borrowing(lm):
            while True:
                with lock:  # one step at a time on a model: other streams and threads take turns between steps
                    record = next(steps, None)
                if record is None:
                    break
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
        state.open = False
        state.generation = Generation(
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
    from drafting.engine.sampling_params import seed_in_range, temperature_problem

    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be a positive whole number of tokens, not {max_new_tokens!r}.")
    if not isinstance(temperature, (int, float)):
        raise ValueError(f"temperature must be 0 (greedy) or a positive finite number, not {temperature!r}.")
    if temperature_problem(temperature):
        raise ValueError(f"temperature {temperature_problem(temperature)}, not {temperature!r}.")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be 0 (off) or a positive whole number of tokens, not {top_k!r}.")
    if not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be a number in (0, 1], not {top_p!r}.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not seed_in_range(seed)):
        raise ValueError(f"seed must be None or a whole number from 0 to 2**64 - 1, not {seed!r}.")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if not all(isinstance(s, str) and s for s in stops):
        raise ValueError("stop must be a string or a list of non-empty strings.")
    return stops


def _model(model, tokenizer, device: str, dtype: str, weights: str, engine: str):
    from drafting.models.borrowed import is_model_object, wrap_model

    if is_model_object(model):
        if tokenizer is None:
            raise ValueError("A model object needs its tokenizer too: pass tokenizer=... with it.")
        if (device, dtype, weights) != ("auto", "auto", "auto"):
            raise ValueError("device, dtype and weights apply to models goose loads; a model object is used as it is.")
        if engine != "transformers":
            raise ValueError(f"A transformers model object runs on the transformers engine, not {engine!r}.")
        lm = wrap_model(model, tokenizer)
        lm.borrowed = True  # attention is switched only while a stream runs
        return lm, None
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be None, a name, a path or a transformers model object, not {type(model).__name__}.")
    if tokenizer is not None:
        raise ValueError("tokenizer= goes with a model object; a model goose loads brings its own tokenizer.")
    key = (model, device, dtype, weights, engine)
    with _TABLES:  # two threads asking for one model load it once
        if key not in _MODELS:
            from drafting.models.loader import load_model

            _MODELS[key] = load_model(model, device=device, dtype=dtype, weights=weights, engine=engine)
        return _MODELS[key], key


def _model_lock(net):
    """The lock a step on ``net`` runs under: threads and interleaved streams on one model take turns step by step
    (re-entrant, so a step's own work may take it again); different models run at once."""
    with _TABLES:
        lock = _MODEL_LOCKS.get(net)
        if lock is None:
            lock = _MODEL_LOCKS[net] = threading.RLock()
        return lock


@contextmanager
def _borrowing(lm):
    """While any stream runs on a caller's model, goose's tree attention is switched on (drafting.models.borrowed):
    the first to start switches it, the last to end puts the model's own back, so one ending never changes the
    attention under another still running. Nothing for a model goose loaded."""
    net = lm.model if getattr(lm, "borrowed", False) else None
    if net is None:
        yield
        return
    from drafting.models.borrowed import borrowed

    with _TABLES:
        entry = _BORROWS.get(net)
        if entry is None:
            restore = ExitStack()
            restore.enter_context(borrowed(net))
            entry = _BORROWS[net] = [0, restore]
        entry[0] += 1
    try:
        yield
    finally:
        with _TABLES:
            entry[0] -= 1
            if entry[0] == 0:
                del _BORROWS[net]
                entry[1].close()


def _decoder(lm, key, speculator: str, fresh: bool, claim: _StreamState):
    """The kept decoder of (model, spec), claimed for this call; a fresh one for a seeded call, a caller's model,
    or while the kept one serves a stream still open (each generation owns its speculator's state)."""
    from drafting.engine.decode import Decoder
    from drafting.machine.step_hooks import machine_hooks
    from drafting.speculators import create

    if not isinstance(speculator, str):
        raise ValueError(f"speculator must be a spec string such as 'goose' or 'pld:draft=8', not {speculator!r}.")
    spec = create(speculator)  # SpecError, one sentence, for an unknown name or option
    if key is None or fresh:
        return Decoder(lm, spec, hooks=machine_hooks())  # UnsupportedModelError for a tree speculator on a sliding-window model
    dkey = (key, spec.spec())
    with _TABLES:
        kept = _DECODERS.get(dkey)
        if kept is not None and not _in_use(dkey):
            _CLAIMS[dkey] = weakref.ref(claim)
            return kept
    decoder = Decoder(lm, spec, hooks=machine_hooks())
    if kept is None:
        with _TABLES:
            if dkey not in _DECODERS:  # else another thread kept one meanwhile: this one serves this call alone
                _DECODERS[dkey] = decoder
                _CLAIMS[dkey] = weakref.ref(claim)
    return decoder


def _in_use(dkey) -> bool:
    ref = _CLAIMS.get(dkey)
    claim = ref() if ref is not None else None
    return claim is not None and claim.open  # a stream dropped unfinished is freed, and its claim with it


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
