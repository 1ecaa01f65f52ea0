"""The decode loop: speculator proposes -> one forward verifies -> emit -> speculator observes.

Every step yields a StepRecord; ``Decoder.result`` holds the totals once the stream ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from .kv_cache import new_cache

from .model import LoadedModel
from .phase_clock import PhaseClock
from .speculators.base import Speculator, StepResult
from .static_shapes import StaticForward, StaticShapes
from .trace import StepRecord
from .tree import Draft, DraftTree
from .verify import Forward, greedy_accept, keep_accepted

# An acceptor turns a tree and its logits into (accepted node indices, bonus token).
Acceptor = Callable[[DraftTree, torch.Tensor], tuple[list[int], int]]


class ContextError(ValueError):
    """The prompt does not fit the model's context window; one sentence."""


class UnsupportedModelError(ValueError):
    """A tree speculator was asked to run on a model whose attention a tree mask would break; one sentence."""


def greedy_acceptor(tree: DraftTree, logits: torch.Tensor) -> tuple[list[int], int]:
    return greedy_accept(tree, logits[: len(tree)].argmax(-1).tolist())


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
    margins: list[float] | None = None  # top-2 logit gap behind each output token (Decoder(record_margins=True))

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
        record_margins: bool = False,
        static_shapes: StaticShapes | None = None,
    ):
        if lm.sliding_window and speculator.name != "ar":
            # A custom 4-D mask replaces the model's sliding-window / chunked rule: outputs would silently change.
            raise UnsupportedModelError(
                f"{lm.name} uses sliding-window or chunked attention (window {lm.sliding_window}), which tree "
                f"verification would silently break, so {speculator.name!r} cannot run on it; only 'ar' can."
            )
        self.lm = lm
        self.speculator = speculator
        self.acceptor = acceptor or greedy_acceptor
        self.record_top = record_top
        self.record_margins = record_margins  # how close each emitted token was to a tie (low-precision exactness)
        self.static_shapes = static_shapes  # opt-in fixed step shapes (drafting.static_shapes); None = dynamic
        if static_shapes:
            self.forward = StaticForward.shared(lm, static_shapes)
        else:
            self.forward = Forward(lm.model, lm.dtype, lm.device)
        self.max_context = self.forward.context if static_shapes else lm.max_context  # a static cache may be shorter
        self.clock = PhaseClock.for_model(lm.model)
        self.result: GenerationResult | None = None
        speculator.bind(lm)

    def check_fits(self, prompt_ids: list[int]) -> None:
        if len(prompt_ids) + 1 > self.max_context:
            raise ContextError(
                f"The prompt has {len(prompt_ids)} tokens, more than the model's context window of "
                f"{self.max_context} leaves room for."
            )
        if not prompt_ids:
            raise ContextError("The prompt is empty.")

    def generate(self, prompt_ids: list[int], max_new_tokens: int, **kw) -> GenerationResult:
        for _ in self.stream(prompt_ids, max_new_tokens, **kw):
            pass
        assert self.result is not None
        return self.result

    def stream(
        self, prompt_ids: list[int], max_new_tokens: int, should_stop: Callable[[], bool] | None = None
    ) -> Iterator[StepRecord]:
        self.check_fits(prompt_ids)
        lm, spec = self.lm, self.speculator
        result = GenerationResult(prompt_ids=list(prompt_ids), output_ids=[], margins=[] if self.record_margins else None)
        self.result = result
        cache = self.forward.new_cache() if self.static_shapes else new_cache(lm.model.config)
        clock = self.clock
        t_start = time.perf_counter()
        m_start = clock.mark()
        context = list(prompt_ids)
        spec.reset(list(context))
        if len(context) > 1:
            rows = spec.prefill_logit_rows
            logits = self.forward.prefill(context[:-1], cache, rows)
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
            room = self.max_context - prefix_len
            if room < 1:
                result.stop_reason = "context"
                break
            t0 = clock.mark()
            draft = spec.propose(context)
            t1 = clock.mark()
            draft = _fit(draft, room)
            logits = self.forward.step(draft, cache)
            path, bonus = self.acceptor(draft.tree, logits)
            keep_accepted(cache, prefix_len, path)
            tree = draft.tree
            emitted = [tree.tokens[i] for i in path[1:]] + [bonus]
            stop = None
            for i, tok in enumerate(emitted):
                if tok in lm.eos_ids:
                    emitted, stop = emitted[: i + 1], "eos"
                    break
            left = max_new_tokens - len(result.output_ids)
            if len(emitted) >= left:
                emitted = emitted[:left]
                stop = stop or "max_new_tokens"
                if stop == "eos" and emitted[-1] not in lm.eos_ids:
                    stop = "max_new_tokens"
            if stop is None and prefix_len + len(path) + 1 > self.max_context:
                stop = "context"
            t2 = clock.mark()
            context.extend(emitted)
            spec.observe(draft, StepResult(logits=logits, accepted=path, emitted=emitted, prefix_len=prefix_len))
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
                top=_top(logits[: len(tree)], self.record_top) if self.record_top else None,
                stop=stop,
            )
            record.rows = record.info.pop("rows", None)
            result.output_ids.extend(emitted)
            if result.margins is not None:
                top2 = logits[path].float().topk(2, dim=-1).values  # emitted[j] is the argmax at path[j]
                result.margins.extend((top2[:, 0] - top2[:, 1]).tolist()[: len(emitted)])
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
    """Shrink a draft that would run past the context window (keep the shallow part of the tree)."""
    if draft.size <= room:
        return draft
    tree = draft.tree
    depth = max(tree.depths)
    while len(tree) > room and depth > 0:
        depth -= 1
        tree = draft.tree.truncate_depth(depth)
    return Draft(tree=tree, rows=None, info=dict(draft.info, trimmed=True))


def _top(logits: torch.Tensor, k: int) -> list:
    probs = torch.softmax(logits.float(), dim=-1)
    p, t = probs.topk(k, dim=-1)
    return [[[int(a), round(float(b), 4)] for a, b in zip(ti, pi)] for ti, pi in zip(t.tolist(), p.tolist())]
