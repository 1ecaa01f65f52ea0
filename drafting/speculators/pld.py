"""Prompt lookup decoding: draft the continuation of the longest earlier match of the text's last n-gram.

Gated by confidence: an EMA of how often the first drafted token is accepted decides whether drafting pays;
while it does not, steps are plain (one row), with an occasional probe so the gate can reopen when the text
starts repeating itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from drafting.sources.context import ContextIndex
from drafting.engine.tree import CONTEXT, Draft, DraftTree
from drafting.engine.speculator import Settings, Speculator, StepResult, option
from drafting.errors import SpecError
from drafting.sources.context import catch_up


@dataclass(frozen=True)
class PromptLookupSettings(Settings):
    max_ngram: int = option(3, "longest n-gram matched against earlier text")
    min_ngram: int = option(2, "shortest n-gram accepted as a match")
    draft: int = option(10, "most tokens drafted per step")
    gate: bool = option(True, "skip drafting while the first drafted token is rarely accepted")
    threshold: float = option(0.25, "first-token acceptance EMA below which drafting pauses")
    probe: int = option(6, "while paused, draft again after this many plain steps")

    def __post_init__(self):
        if self.min_ngram < 1 or self.max_ngram < self.min_ngram:
            raise SpecError("pld needs 1 <= min_ngram <= max_ngram.")


class PromptLookup(Speculator):
    name = "pld"
    order = 20
    summary_line = "context-match chain (prompt lookup decoding), confidence-gated"
    settings_class = PromptLookupSettings

    def __init__(self, **settings):
        super().__init__(**settings)
        s = self.settings
        self.index = ContextIndex(range(s.min_ngram, s.max_ngram + 1))
        self.ema = 1.0
        self.paused_steps = 0
        self.counts = {"offered": 0, "accepted": 0, "drafted_steps": 0, "gated_steps": 0}

    def reset(self, context: list[int]) -> None:
        self.index.reset(context)
        self.ema = 1.0
        self.paused_steps = 0

    def resume(self, context: list[int]) -> bool:
        return catch_up(self.index, context)

    def propose(self, context: list[int]) -> Draft:
        tree = DraftTree(context[-1])
        s = self.settings
        if s.gate and self.ema < s.threshold and self.paused_steps < s.probe:
            self.paused_steps += 1
            self.counts["gated_steps"] += 1
            return Draft(tree=tree, info={"route": "gated"})
        m = self.index.match(s.draft)
        if m.chain:
            tree.add_chain(m.chain, 0, CONTEXT)
        return Draft(tree=tree, info={"route": "chain" if m.chain else "single", "ngram": m.ngram})

    def observe(self, draft: Draft, result: StepResult) -> None:
        self.index.extend(result.emitted)
        offered = len(draft.tree) - 1
        if offered:
            accepted = len(result.accepted) - 1
            self.counts["offered"] += offered
            self.counts["accepted"] += accepted
            self.counts["drafted_steps"] += 1
            self.ema = 0.7 * self.ema + 0.3 * (1.0 if accepted else 0.0)
            self.paused_steps = 0

    def stats(self) -> dict:
        return dict(self.counts)
