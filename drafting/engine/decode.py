"""The decode loop: speculator proposes -> one forward verifies -> accept -> speculator observes.

``Decoder.run`` returns a ``DecodeRun``: iterate it for one ``StepRecord`` per step; its ``result`` is the
generation's (filled as it goes, complete once the iteration ends). What rides along on a run without being
part of decoding (the machine's cost-curve watch, thread sharing, margins) is a hook the caller installs
(drafting.engine.hooks).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch

from drafting.engine.acceptance import Acceptor, greedy_acceptor, takes_reads
from drafting.engine.hooks import DecodeHook, StepDone
from drafting.engine.loaded_model import LoadedModel
from drafting.engine.speculator import Speculator, StepResult
from drafting.engine.step_reads import StepReads
from drafting.engine.stop_rules import check_fits, cut_at_eos
from drafting.engine.trace import StepRecord
from drafting.engine.tree import Draft
from drafting.errors import OutOfMemory, gpu_out_of_memory

# what to do when a step does not fit the GPU's memory (drafting.errors.gpu_out_of_memory)
STEP_ROOM = "use a shorter prompt, fewer new tokens or smaller drafts, or free some of the GPU's memory"


@dataclass
class GenerationResult:
    prompt_ids: list[int]
    output_ids: list[int]  # new tokens, an EOS included when generation stopped on it
    records: list[StepRecord] = field(default_factory=list)
    stop_reason: str = ""
    prefill_s: float = 0.0
    wall_s: float = 0.0  # prefill + all steps
    draft_s: float = 0.0
    verify_s: float = 0.0
    margins: list[float] | None = None  # top-2 logit gap behind each output token (hooks.RecordMargins)
    cached_tokens: int = 0  # prompt tokens found in a kept cache (Decoder.run(cache=...)), not prefilled again

    @property
    def steps(self) -> int:
        return len(self.records)

    @property
    def mean_accepted(self) -> float:
        return len(self.output_ids) / max(1, self.steps)


class Decoder:
    """Generates with one speculator; reusable across prompts (speculator state such as tables persists)."""

    def __init__(
        self,
        lm: LoadedModel,
        speculator: Speculator,
        acceptor: Acceptor | None = None,
        record_top: int = 0,
        static_shapes=None,
        hooks: Sequence[DecodeHook] = (),
    ):
        if lm.make_forward is None:
            raise ValueError(f"{lm.name} was loaded without an engine to run it (LoadedModel.make_forward).")
        # the engine's verifier; static_shapes: the transformers engine's opt-in fixed step shapes (None = dynamic)
        self.forward = lm.make_forward(lm, static_shapes)
        if speculator.name != "ar" and self.forward.unsupported is not None:
            raise self.forward.unsupported  # one sentence when trees cannot be verified exactly on it
        self.lm = lm
        self.speculator = speculator
        self.acceptor = acceptor or greedy_acceptor
        self.record_top = record_top
        self.static_shapes = static_shapes
        self.hooks = list(hooks)
        self.max_context = self.forward.context  # a static cache may be shorter than the model's window
        self.clock = self.forward.clock
        out_of_memory = None
        try:
            speculator.bind(lm)  # may measure what verification costs: passes of up to a hundred rows and more
        except Exception as exc:
            out_of_memory = gpu_out_of_memory(exc, "measuring what verification costs", STEP_ROOM)
            if out_of_memory is None:
                raise
        if out_of_memory is not None:  # raised outside the handler, as in DecodeRun.__next__
            raise OutOfMemory(out_of_memory)

    def check_fits(self, prompt_ids: list[int]) -> None:
        if self.static_shapes and self.max_context < self.lm.max_context:
            check_fits(prompt_ids, self.max_context, "the static cache (StaticShapes.context) of")
        else:
            check_fits(prompt_ids, self.max_context)

    def generate(self, prompt_ids: list[int], max_new_tokens: int, **kw) -> GenerationResult:
        return self.run(prompt_ids, max_new_tokens, **kw).finish()

    def run(self, prompt_ids: list[int], max_new_tokens: int, should_stop: Callable[[], bool] | None = None,
            cache=None, acceptor: Acceptor | None = None) -> "DecodeRun":
        """One generation, run as it is iterated. ``cache``: a KV cache kept from an earlier run that holds the
        first ``cache.get_seq_length()`` tokens of ``prompt_ids`` (all but the last at most); only the rest is
        prefilled. Afterwards its first len(prompt + output) - 1 positions hold those tokens in order (a last
        step cut at EOS or the token limit leaves the rest of its accepted path after them). ``acceptor``: this
        run's acceptance rule (default: the decoder's)."""
        self.check_fits(prompt_ids)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, not {max_new_tokens}.")
        cached = 0 if cache is None else cache.get_seq_length()
        if cached > len(prompt_ids) - 1:
            raise ValueError(f"The kept cache holds {cached} tokens, more than the {len(prompt_ids) - 1} before the prompt's last.")
        return DecodeRun(self, list(prompt_ids), max_new_tokens, should_stop, cache, acceptor or self.acceptor)


class DecodeRun:
    """One generation: iterate for its step records; ``result`` is its ``GenerationResult``."""

    def __init__(self, decoder: Decoder, prompt_ids: list[int], max_new_tokens: int,
                 should_stop: Callable[[], bool] | None, cache, acceptor: Acceptor):
        self.lm = decoder.lm
        cached = 0 if cache is None else cache.get_seq_length()
        self.result = GenerationResult(prompt_ids=prompt_ids, output_ids=[], cached_tokens=cached)
        self._steps = _steps(decoder, self, max_new_tokens, should_stop, cache, acceptor)

    def __iter__(self) -> Iterator[StepRecord]:
        return self

    def __next__(self) -> StepRecord:
        try:
            return next(self._steps)
        except StopIteration:
            raise
        except Exception as exc:  # the GPU out of memory is one sentence, not torch's page of figures
            sentence = gpu_out_of_memory(exc, "in a decoding step", STEP_ROOM)
            if sentence is None:
                raise
        raise OutOfMemory(sentence)  # raised outside the handler: torch's error and the step's tensors go with it

    def close(self) -> None:
        self._steps.close()

    def finish(self) -> GenerationResult:
        """Run to the end; the whole result."""
        for _ in self:
            pass
        return self.result


def _steps(dec: Decoder, run: DecodeRun, max_new_tokens: int, should_stop, cache, acceptor) -> Iterator[StepRecord]:
    lm, spec, result, hooks = dec.lm, dec.speculator, run.result, dec.hooks
    cached = result.cached_tokens
    if cache is None:
        cache = dec.forward.new_cache()
    for hook in hooks:
        hook.before_run(run)
    timed_hooks = [hook for hook in hooks if hook.timed]
    untimed_hooks = [hook for hook in hooks if not hook.timed]
    clock = dec.clock
    with_reads = takes_reads(acceptor)
    t_start = time.perf_counter()
    m_start = clock.mark()
    context = list(result.prompt_ids)
    if not (cached and spec.resume(list(context))):  # a kept cache continues what the speculator saw
        spec.reset(list(context))
    if len(context) - 1 > cached:
        rows = spec.prefill_logit_rows
        logits = dec.forward.prefill(context[cached:-1], cache, rows)
        spec.observe_prefill(context[:-1], None if rows == 0 else logits)
    m_prefilled = clock.mark()
    clock.settle()  # the prefill's queued GPU work belongs to the prefill, not to step 1
    result.prefill_s = clock.seconds(m_start, m_prefilled)
    step = 0
    while True:
        if should_stop is not None and should_stop():
            result.stop_reason = "stopped"
            break
        prefix_len = cache.get_seq_length()
        room = dec.max_context - prefix_len
        if room < 1:
            result.stop_reason = "context"
            break
        t0 = clock.mark()
        draft = spec.propose(context)
        t1 = clock.mark()
        draft = _fit(draft, room)
        logits = dec.forward.step(draft, cache)
        # what acceptance and the speculator read of the logits, copied off the device together on first use
        reads = StepReads(logits, argmax=spec.reads_argmax, top_k=spec.reads_top_k(draft), top_rows=len(draft.tree))
        path, bonus = acceptor(draft.tree, logits, reads=reads) if with_reads else acceptor(draft.tree, logits)
        dec.forward.keep(cache, prefix_len, path)
        tree = draft.tree
        emitted, ended = cut_at_eos([tree.tokens[i] for i in path[1:]] + [bonus], lm.eos_ids)
        stop = "eos" if ended else None
        left = max_new_tokens - len(result.output_ids)
        if len(emitted) >= left:
            emitted = emitted[:left]
            stop = stop or "max_new_tokens"
            if stop == "eos" and emitted[-1] not in lm.eos_ids:
                stop = "max_new_tokens"
        if stop is None and prefix_len + len(path) + 1 > dec.max_context:
            stop = "context"
        t2 = clock.mark()
        context.extend(emitted)
        spec.observe(draft, StepResult(logits=logits, accepted=path, emitted=emitted, prefix_len=prefix_len,
                                       reads=reads))
        t3 = clock.mark()
        clock.settle()  # end of step: read the marks once, so no queued work leaks into the next step
        record = StepRecord(
            step=step,
            position=len(result.output_ids),
            tokens=list(tree.tokens),
            parents=list(tree.parents),
            sources=list(tree.sources),
            accepted=path,
            emitted=emitted,
            draft_s=clock.seconds(t0, t1) + clock.seconds(t2, t3),
            verify_s=clock.seconds(t1, t2),
            info=dict(draft.info),
            top=_top(logits[: len(tree)], dec.record_top) if dec.record_top else None,
            stop=stop,
        )
        record.rows = record.info.pop("rows", None)
        done = StepDone(rows=draft.size, prefix_len=prefix_len, verify_s=record.verify_s, logits=logits, path=path,
                        emitted=emitted)
        for hook in timed_hooks:
            hook.after_step(run, done)
        if untimed_hooks:  # the caller's work, not decoding's: the run's clock skips it
            h0 = time.perf_counter()
            for hook in untimed_hooks:
                hook.after_step(run, done)
            t_start += time.perf_counter() - h0
        result.output_ids.extend(emitted)
        result.records.append(record)
        result.draft_s += record.draft_s
        result.verify_s += record.verify_s
        result.wall_s = time.perf_counter() - t_start
        step += 1
        yield record
        if stop:
            result.stop_reason = stop
            break
    result.wall_s = time.perf_counter() - t_start


def _fit(draft: Draft, room: int) -> Draft:
    """Shrink a draft that would run past the context window: keep the shallow part of the tree and drop the
    draft rows, and their description in ``info`` with them, so the step record shows only what was verified."""
    if draft.size <= room:
        return draft
    tree = draft.tree
    depth = max(tree.depths)
    while len(tree) > room and depth > 0:
        depth -= 1
        tree = draft.tree.truncate_depth(depth)
    info = {k: v for k, v in draft.info.items() if k != "rows"}
    return Draft(tree=tree, rows=None, info=dict(info, trimmed=True))


def _top(logits: torch.Tensor, k: int) -> list:
    probs = torch.softmax(logits.float(), dim=-1)
    p, t = probs.topk(k, dim=-1)
    return [[[int(a), round(float(b), 4)] for a, b in zip(ti, pi)] for ti, pi in zip(t.tolist(), p.tolist())]
