"""A chat conversation driven through the Decoder: history, speculator choice, baseline, trace, and a KV cache
kept from turn to turn.

Each turn's templated conversation normally starts with every token the cache already holds (the previous
prompt and answer), so only what the template adds (the end of the answer, the new user turn, the assistant
header) is prefilled, and a speculator whose context index holds a prefix of the new conversation catches
up on the added tokens (Speculator.resume) instead of being reset. The longest common prefix is reused whatever happens, so an edited history, an answer
that re-tokenises differently or a cut answer costs only the tokens that differ; a speculator that reads
prefill logits and has not seen this conversation yet gets a full prefill. No UI here.
"""

from __future__ import annotations

import time
import weakref
from typing import Callable, Iterator

from drafting.engine.decode import Decoder, GenerationResult
from drafting.engine.loaded_model import LoadedModel
from drafting.models.chat_template import decode, encode
from drafting.speculators import create
from drafting.engine.trace import StepRecord, TraceWriter
from drafting.machine.plain_speed import PlainBaseline
from drafting.machine.step_hooks import machine_hooks



def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class ChatSession:
    """History of one conversation and the decoder answering it. ``ask`` streams one answer's step records.

    ``keep_cache=False`` prefills the whole conversation every turn (the reference the kept cache is measured
    and tested against).
    """

    def __init__(
        self,
        lm: LoadedModel,
        speculator: str,
        acceptor=None,
        max_new_tokens: int = 256,
        system: str | None = None,
        raw: bool = False,
        trace_path=None,
        keep_cache: bool = True,
    ):
        self.lm = lm
        self.acceptor = acceptor
        self.max_new_tokens = max_new_tokens
        self.system = system
        self.raw = raw
        # a cropped sliding-window layer cannot grow back what it dropped, so those models prefill every turn
        self.keep_cache = keep_cache and not lm.sliding_window
        self.messages: list[dict] = []
        self._decoders: dict[str, Decoder] = {}
        self.decoder: Decoder = self._decoder(speculator)
        self.last_result: GenerationResult | None = None  # the latest turn's, filled as it is decoded
        self.ar_step_s: float | None = None
        self.baseline = None  # drafting.machine.plain_speed.PlainBaseline once measure_baseline() ran
        self.turns = 0
        self.first_token_s: float | None = None  # last turn: from ask() to its first emitted tokens
        self.prefilled: int = 0  # last turn: prompt tokens run through prefill (the rest came from the cache)
        self.prompt_tokens: int = 0  # last turn: tokens of the templated conversation
        self.writer = None
        if trace_path is not None:
            self.writer = TraceWriter(trace_path, {"command": "chat", "model": lm.name}, tokenizer=lm.tokenizer)
        self._cache = None
        self._cached_ids: list[int] = []  # the tokens self._cache holds, in order
        self._seen: set[int] = set()  # decoders (by id) whose speculator has observed this cached conversation
        self._answering = None  # weak reference to the latest ask()'s stream: the one the cache belongs to
        self.new_conversation()

    @property
    def speculator(self) -> str:
        return self.decoder.speculator.spec()

    def _decoder(self, spec: str) -> Decoder:
        if spec not in self._decoders:  # SpecError (one sentence) propagates to the caller
            self._decoders[spec] = Decoder(self.lm, create(spec), acceptor=self.acceptor, hooks=machine_hooks())
        return self._decoders[spec]

    def use(self, spec: str) -> None:
        self.decoder = self._decoder(spec)

    def new_conversation(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []
        self.drop_cache()

    def drop_cache(self) -> None:
        self._cache, self._cached_ids, self._seen = None, [], set()

    def measure_baseline(self) -> float:
        """Seconds per plain (`ar`) decoding step on this model: ``self.baseline`` reads it from this process's
        own cost curve at each step's context length (drafting.machine.plain_speed); ``ar_step_s`` is its value now."""
        self.baseline = PlainBaseline(self.lm)
        self.ar_step_s = self.baseline.step_s()
        return self.ar_step_s

    def prompt_ids(self) -> list[int]:
        return encode(self.lm.tokenizer, self.messages, raw=self.raw)

    def _cache_for(self, ids: list[int]):
        """The kept cache cropped to the longest prefix it shares with ``ids``, or a fresh cache."""
        reuse = self._cache is not None and self.keep_cache
        if reuse and id(self.decoder) not in self._seen and self.decoder.speculator.prefill_logit_rows != 0:
            reuse = False  # its adjacency table would miss this conversation's prefill logits
        keep = min(common_prefix(self._cached_ids, ids), len(ids) - 1) if reuse else 0
        keep = self._crop_layers(keep) if keep else 0
        if keep == 0:
            self.drop_cache()
            self._cache = self.decoder.forward.new_cache()
            return self._cache
        self._cached_ids = self._cached_ids[:keep]
        return self._cache

    def _crop_layers(self, n: int) -> int:
        """Crop the kept cache to its first ``n`` tokens, or fewer where a step or a crop interrupted midway left
        part of it unfinished (the engine's ``Forward.crop``); the length kept, 0 when nothing is left."""
        return self.decoder.forward.crop(self._cache, n) if self._cache is not None else 0

    def _after_turn(self, ids: list[int], out: list[int]) -> None:
        """Leave the cache holding prompt + answer but the last token. A step cut at an EOS or at the token
        limit keeps its whole accepted path, and an answer interrupted inside a forward pass leaves rows of an
        unverified tree (or, inside a prefill, some layers shorter than others): every layer is cropped to the
        shortest, which all hold in order, and the cache remembers that many tokens."""
        held = (ids + out)[:-1]
        keep = self._crop_layers(len(held))
        if keep == 0:
            self.drop_cache()
            return
        self._cached_ids = held[:keep]
        self._seen.add(id(self.decoder))

    def ask(self, text: str, should_stop: Callable[[], bool] | None = None) -> Iterator[tuple[StepRecord, float]]:
        """Stream the answer to ``text`` as (record, seconds of decoding so far, prefill excluded).

        The answer joins the history when the stream ends, also when it was stopped early (an earlier answer still
        being streamed ends here: its cache is this one's). A prompt that does not fit the context raises
        ContextError, and a turn that fails before any token of its answer raises its error; either leaves the
        history as it was.
        """
        earlier = self._answering() if self._answering is not None else None
        if earlier is not None:
            try:
                earlier.close()  # its partial answer joins the history, as if it had been stopped
            except ValueError:
                raise ValueError("An earlier answer of this chat is still being generated in another thread; "
                                 "stop it before asking again.") from None
        turn = self._turn(text, should_stop)
        self._answering = weakref.ref(turn)
        return turn

    def _turn(self, text: str, should_stop: Callable[[], bool] | None) -> Iterator[tuple[StepRecord, float]]:
        t_ask = time.perf_counter()
        self.messages.append({"role": "user", "content": text})
        try:
            ids = self.prompt_ids()
            self.decoder.check_fits(ids)
        except Exception:
            self.messages.pop()
            raise
        self.turns += 1
        self.first_token_s = None
        out: list[int] = []
        answered = True
        try:
            cache = self._cache_for(ids)
            self.prefilled = len(ids) - 1 - cache.get_seq_length()
            self.prompt_tokens = len(ids)
            if self.writer is not None:
                self.writer.section({"turn": self.turns, "prompt": text, "speculator": self.speculator,
                                     "prompt_tokens": len(ids), "prefilled": self.prefilled})
            run = self.decoder.run(ids, self.max_new_tokens, should_stop=should_stop, cache=cache)
            result = self.last_result = run.result
            for record in run:
                if self.first_token_s is None:
                    self.first_token_s = time.perf_counter() - t_ask
                out.extend(record.emitted)
                if self.writer is not None:
                    self.writer.write(record)
                yield record, result.wall_s - result.prefill_s
        except GeneratorExit:  # closed: stopped like should_stop, whatever it had answered joins the history
            raise
        except BaseException:
            answered = bool(out)  # a turn that failed before its answer leaves no user message without one
            raise
        finally:
            self._after_turn(ids, out)
            if answered:
                self.messages.append({"role": "assistant", "content": decode(self.lm.tokenizer, out, self.lm.eos_ids)})
            else:
                self.messages.pop()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
