"""A chat conversation driven through drafting's Decoder: history, speculator choice, baseline and trace.

Shared by the Textual chat app and the plain line REPL; no UI here.
"""

from __future__ import annotations

from typing import Callable, Iterator

from drafting.decode import Decoder
from drafting.model import LoadedModel
from drafting.prompting import decode, encode
from drafting.speculators import create
from drafting.trace import StepRecord, TraceWriter

BASELINE_PROMPT = "Say hello and introduce yourself in two sentences."
BASELINE_STEPS = 16


class ChatSession:
    """History of one conversation and the decoder answering it. ``ask`` streams one answer's step records."""

    def __init__(
        self,
        lm: LoadedModel,
        speculator: str,
        acceptor=None,
        max_new_tokens: int = 256,
        system: str | None = None,
        raw: bool = False,
        trace_path=None,
    ):
        self.lm = lm
        self.acceptor = acceptor
        self.max_new_tokens = max_new_tokens
        self.system = system
        self.raw = raw
        self.messages: list[dict] = []
        self._decoders: dict[str, Decoder] = {}
        self.decoder: Decoder = self._decoder(speculator)
        self.ar_step_s: float | None = None
        self.baseline = None  # drafting.plain_baseline.PlainBaseline once measure_baseline() ran
        self.turns = 0
        self.writer = None
        if trace_path is not None:
            self.writer = TraceWriter(trace_path, {"command": "chat", "model": lm.name}, tokenizer=lm.tokenizer)
        self.new_conversation()

    @property
    def speculator(self) -> str:
        return self.decoder.speculator.spec()

    def _decoder(self, spec: str) -> Decoder:
        if spec not in self._decoders:  # SpecError (one sentence) propagates to the caller
            self._decoders[spec] = Decoder(self.lm, create(spec), acceptor=self.acceptor)
        return self._decoders[spec]

    def use(self, spec: str) -> None:
        self.decoder = self._decoder(spec)

    def new_conversation(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def measure_baseline(self, steps: int = BASELINE_STEPS) -> float:
        """Seconds per plain (`ar`) decoding step on this model: ``self.baseline`` reads it from this process's
        own cost curve at each step's context length (drafting.plain_baseline); ``ar_step_s`` is its value now."""
        from drafting.plain_baseline import PlainBaseline

        self.baseline = PlainBaseline(self.lm)
        self.ar_step_s = self.baseline.step_s()
        return self.ar_step_s

    def prompt_ids(self) -> list[int]:
        return encode(self.lm.tokenizer, self.messages, raw=self.raw)

    def ask(self, text: str, should_stop: Callable[[], bool] | None = None) -> Iterator[tuple[StepRecord, float]]:
        """Stream the answer to ``text`` as (record, seconds of decoding so far, prefill excluded).

        The answer joins the history when the stream ends, also when it was stopped early; a prompt that does
        not fit the context raises ContextError and leaves the history as it was.
        """
        self.messages.append({"role": "user", "content": text})
        try:
            ids = self.prompt_ids()
            self.decoder.check_fits(ids)
        except Exception:
            self.messages.pop()
            raise
        self.turns += 1
        if self.writer is not None:
            self.writer.section({"turn": self.turns, "prompt": text, "speculator": self.speculator,
                                 "prompt_tokens": len(ids)})
        out: list[int] = []
        try:
            for record in self.decoder.stream(ids, self.max_new_tokens, should_stop=should_stop):
                out.extend(record.emitted)
                if self.writer is not None:
                    self.writer.write(record)
                result = self.decoder.result
                yield record, result.wall_s - result.prefill_s
        finally:
            self.messages.append({"role": "assistant", "content": decode(self.lm.tokenizer, out, self.lm.eos_ids)})

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class Detokenizer:
    """Turns a stream of token ids into text pieces, holding back a piece while it ends mid-character."""

    def __init__(self, tokenizer, skip_ids=frozenset()):
        self.tokenizer = tokenizer
        self.skip = set(skip_ids)
        self.ids: list[int] = []
        self.text = ""

    def push(self, token: int) -> str:
        if token in self.skip:
            return ""
        self.ids.append(token)
        full = self.tokenizer.decode(self.ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        if full.endswith("\ufffd"):
            return ""
        piece = full[len(self.text):]
        self.text = full
        return piece
