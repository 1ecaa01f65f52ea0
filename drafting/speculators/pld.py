"""Prompt lookup decoding: draft the continuation of the longest earlier match of the text's last n-gram.

Gated by confidence: an EMA of how often the first drafted token is accepted decides whether drafting pays;
while it does not, steps are plain (one row), with an occasional probe so the gate can reopen when the text
starts repeating itself. Priced (``priced=on``, where the model has a measured verify cost curve): the chain is
cut to the prefix whose expected accepted tokens pay for its rows, each token priced by the acceptance measured
at its depth and n-gram length, so on a steep curve (llama.cpp on a CPU: a second row costs most of a step) only
sure chains are verified, and on a flat one the whole chain is.

With ``aligned=on`` the chain is the text the answer is copying, read at its pointer (drafting.sources.aligned)
while the answer follows it, and the n-gram match elsewhere: prompt lookup that keeps its place in an edited file.
The gate watches n-gram chains only: an aligned chain is drafted while the alignment holds (the source drops the
pointer itself when the answer departs), so failed n-gram guesses after an edit do not pause the copying after it.
"""

from __future__ import annotations

from dataclasses import dataclass

from drafting.budget.acceptance_rates import AcceptanceStats
from drafting.sources.context import ContextIndex
from drafting.engine.tree import ALIGNED, CONTEXT, Draft, DraftTree
from drafting.engine.speculator import Settings, Speculator, StepResult, option
from drafting.errors import SpecError
from drafting.sources.aligned import HELD, chain_plan
from drafting.sources.context import catch_up
from drafting.speculators.candidates import Candidates
from drafting.speculators.follows_text import FollowsText

CHAIN_PRIOR = 0.6  # acceptance of a chain token given its parent's, before any is measured


def depth_key(ngram: int, depth: int) -> tuple:
    return ngram, min(depth, 12)


@dataclass(frozen=True)
class PromptLookupSettings(Settings):
    max_ngram: int = option(3, "longest n-gram matched against earlier text")
    min_ngram: int = option(2, "shortest n-gram accepted as a match")
    draft: int = option(10, "most tokens drafted per step")
    gate: bool = option(True, "skip drafting while the first drafted token is rarely accepted")
    threshold: float = option(0.25, "first-token acceptance EMA below which drafting pauses")
    probe: int = option(6, "while paused, draft again after this many plain steps")
    priced: bool = option(True, "verify only the chain's prefix that pays on this hardware's measured verify cost "
                          "curve (acceptance learned per depth); off = the whole match up to draft")
    aligned: bool = option(False, "draft the text the answer is copying at its pointer while the answer follows it "
                           "(an edited file; re-aligned after each edit), the n-gram match elsewhere")

    def __post_init__(self):
        if self.min_ngram < 1 or self.max_ngram < self.min_ngram:
            raise SpecError("pld needs 1 <= min_ngram <= max_ngram.")


class PromptLookup(FollowsText, Speculator):
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
        self.counts = {"offered": 0, "accepted": 0, "drafted_steps": 0, "gated_steps": 0, "priced_out_steps": 0}
        self.acceptance = AcceptanceStats()
        self.curve = None  # verify cost curves (drafting.machine.cost_curve.PrefixCost), set by bind() when priced
        # the last step's whole chain, its keys and its source, learned from against what the target emitted
        self._match = None

    def bind(self, lm) -> None:
        if self.settings.priced and self.curve is None and lm.verify_cost is not None:
            self.curve = lm.verify_cost()

    def reset(self, context: list[int]) -> None:
        self.index.reset(context)
        self.ema = 1.0
        self.paused_steps = 0
        self.align(context)

    def resume(self, context: list[int]) -> bool:
        if not catch_up(self.index, context):
            return False
        self.align(context)
        return True

    def chain(self, aligned_only: bool = False) -> tuple[list[int], tuple | list, tuple | list, str, dict]:
        """(tokens, acceptance keys, priors, source tag, step info) of this step's chain: the aligned text's while
        the answer follows it (aligned=on), else the longest n-gram match's (none when ``aligned_only``)."""
        s = self.settings
        if self.aligned is not None:
            found = self.aligned.lookup(s.draft)
            if found.state == HELD:
                keys, priors = chain_plan(found.kind, len(found.chain))
                return found.chain, keys, priors, ALIGNED, {"ngram": 0, "match": len(found.chain)}
        if aligned_only:
            return [], (), (), CONTEXT, {}
        m = self.index.match(s.draft)
        keys = [depth_key(m.ngram, d) for d in range(1, len(m.chain) + 1)]
        return m.chain, keys, [CHAIN_PRIOR] * len(keys), CONTEXT, {"ngram": m.ngram, "match": len(m.chain)}

    def propose(self, context: list[int]) -> Draft:
        tree = DraftTree(context[-1])
        s = self.settings
        self._match = None
        gated = s.gate and self.ema < s.threshold and self.paused_steps < s.probe
        chain, keys, priors, source, info = self.chain(aligned_only=gated)
        if gated and not chain:
            self.paused_steps += 1
            self.counts["gated_steps"] += 1
            return Draft(tree=tree, info={"route": "gated"})
        self._match = (chain, keys, source) if chain else None
        if chain and self.curve is not None:
            cand = Candidates(tree=tree)
            for d, (tok, key, prior) in enumerate(zip(chain, keys, priors), start=1):
                cand.add(tok, d - 1, source, key, prior)
            tree, _ = cand.paying(self.acceptance, self.curve.at(len(context) - 1))
        elif chain:
            tree.add_chain(chain, 0, source)
        route = "chain" if len(tree) > 1 else "priced_out" if chain else "single"
        if route == "priced_out":
            self.counts["priced_out_steps"] += 1
        return Draft(tree=tree, info={"route": route, **info})

    def observe(self, draft: Draft, result: StepResult) -> None:
        self.index.extend(result.emitted)
        if self.aligned is not None:
            self.aligned.extend(result.emitted)
        offered = len(draft.tree) - 1
        if self._match is not None:
            self.learn(self._match, result.emitted)
        if offered:
            accepted = len(result.accepted) - 1
            self.counts["offered"] += offered
            self.counts["accepted"] += accepted
            self.counts["drafted_steps"] += 1
            if self._match[2] == CONTEXT:  # the gate is the n-gram matches' (an aligned chain has its own check)
                self.ema = 0.7 * self.ema + 0.3 * (1.0 if accepted else 0.0)
                self.paused_steps = 0

    def learn(self, match, emitted: list[int]) -> None:
        """Acceptance per depth from the whole chain, drafted or priced out: the target's emitted tokens say which
        of its first tokens it would have accepted (the step's bonus token tests the first undrafted one), so a
        priced-out chain still teaches the rates that may later price it in."""
        chain, keys, _source = match
        for tok, key, got in zip(chain, keys, emitted):
            self.acceptance.update(key, tok == got)
            if tok != got:
                break

    def stats(self) -> dict:
        return dict(self.counts)
