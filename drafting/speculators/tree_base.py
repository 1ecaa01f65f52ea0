"""What `tr`, `iso` and `goose` share: the adjacency table (harvested from every forward pass), the context
matcher, per-source acceptance counters, the settings they all declare (one field helper each), and
``budget=auto`` — pick, from a candidate tree, the nodes whose estimated path probability pays for their
measured verification cost (``Candidates.paying``).

Subclasses implement ``candidates(context)``, returning a ``Candidates``: a tree plus, per node, an
acceptance-statistics key and a prior acceptance probability, and the order in which nodes would be added.
"""

from __future__ import annotations

import atexit
import os
import time
from bisect import bisect_right
from collections import Counter
from pathlib import Path

from drafting.budget.acceptance_rates import AcceptanceStats
from drafting.budget.selection import most_paying_nodes
from drafting.disk_cache import note_damaged, note_unwritable
from drafting.sources.adjacency import AdjacencyCacheError, AdjacencyTable, DamagedAdjacencyCache
from drafting.sources.context import SpineMatcher
from drafting.engine.tree import CONTEXT, SPINE_TAGS, Draft, DraftTree
from drafting.engine.speculator import Speculator, StepResult, option
from drafting.errors import SpecError
from drafting.sources.context import catch_up
from drafting.speculators.candidates import Candidates

__all__ = ["Candidates", "TreeSpeculator", "score_bucket", "route_of", "budget_field", "bigram_field",
           "harvest_field", "harvest_window_field", "min_score_field", "cache_field"]

_SCORE_EDGES = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9)
SHARED_SETTINGS = ("budget", "bigram", "harvest", "harvest_window", "cache")  # what TreeSpeculator itself reads


def score_bucket(score: float) -> int:
    return bisect_right(_SCORE_EDGES, score)


# -- the settings goose, iso and tr share (fields, not a base class: each keeps its own order in specs) ---------
def budget_field(paper: str):
    return option(
        "auto", f"draft nodes per step: a number ({paper}) or auto = as many as pay on this hardware's "
        "measured verify cost curve, ranked by online acceptance estimates", int, ("auto",),
    )


def bigram_field(default: bool = True, note: str = ""):
    return option(default, "consult the (previous, token) bigram tier of the adjacency table first" + _note(note))


def harvest_field(note: str = ""):
    return option(True, "harvest the prefill's logits into the adjacency table" + _note(note))


def harvest_window_field():
    return option(
        128, "prefill positions harvested, the last N (0 = every one): each costs the output layer over the "
        "vocabulary, which after a long prompt costs more than the extra table rows gain on a CPU",
    )


def min_score_field():
    return option(0.01, "drop adjacency successors scoring below this")


def cache_field():
    return option("", "adjacency table file: loaded when present, saved after each answer (warm starts)")


def _note(note: str) -> str:
    return f" ({note})" if note else ""


class TreeSpeculator(Speculator):
    """Base of the adjacency-table tree speculators (no ``name``: not registered itself). Its subclasses'
    settings declare ``SHARED_SETTINGS`` with the field helpers above."""

    table_k = 10  # adjacency successors kept per token

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        missing = [k for k in SHARED_SETTINGS if k not in cls.options]
        if cls.name and missing:
            raise TypeError(f"{cls.__name__}'s settings lack {', '.join(missing)} (tree_base's field helpers).")

    def __init__(self, **settings):
        super().__init__(**settings)
        s = self.settings
        self.table = AdjacencyTable(k=self.table_size(), bigram=s.bigram)
        self.matcher = SpineMatcher()
        self.acceptance = AcceptanceStats()
        self.curve = None  # verify cost curves (drafting.machine.cost_curve.PrefixCost), set by bind() when budget=auto
        self.overhead_s = 0.0  # EMA of the speculator's own time per step (propose + observe)
        self.counts: Counter = Counter()
        self._keys: list | None = None  # per node of the last proposed draft
        self._last: Draft | None = None
        self._before_root = -1
        self._t_propose = 0.0
        self._pricing = None  # this step's cost curve (at the cache length it is verified at), when budget=auto
        self._gated = False  # this step's tree was not grown: nothing under its first nodes could pay (paying_room)
        self._cache_path: Path | None = None
        if s.cache:
            self.use_cache(s.cache)

    def table_size(self) -> int:
        """Adjacency successors kept per token."""
        return self.table_k

    # -- adjacency cache ---------------------------------------------------------------------------------
    def use_cache(self, path) -> None:
        """Load the adjacency table from ``path`` when it exists, and save it there after each answer. A file that
        is not a table is ignored (and replaced at the next save); a table of other settings is the user's call."""
        path = Path(path).expanduser()
        if os.path.exists(path):  # False, not an error, where a folder on the way cannot be entered
            try:
                self.table.load(path)
            except DamagedAdjacencyCache as exc:
                note_damaged(path, exc.why)
            except AdjacencyCacheError as exc:
                raise SpecError(str(exc)) from None
        if self._cache_path is None:
            atexit.register(self.save_cache)
        self._cache_path = path

    def save_cache(self) -> None:
        if self._cache_path is not None and self.table.vocab:
            try:
                self.table.save(self._cache_path)
            except OSError as exc:  # a warm start is a convenience; never fail a run over it
                note_unwritable(self._cache_path, exc, "the adjacency table is kept for this run only")

    # -- interface ---------------------------------------------------------------------------------------
    @property
    def auto(self) -> bool:
        return self.settings.budget == "auto"

    def bind(self, lm) -> None:
        if self.auto and self.curve is None and lm.verify_cost is not None:
            self.curve = lm.verify_cost()

    def reset(self, context: list[int]) -> None:
        self.save_cache()
        self.matcher.reset(context)
        self._last = None

    def resume(self, context: list[int]) -> bool:
        if not catch_up(self.matcher, context):
            return False
        self.save_cache()
        self._last = None
        return True

    @property
    def prefill_logit_rows(self) -> int | None:
        if not self.settings.harvest:
            return 0
        window = int(self.settings.harvest_window)
        return window if window > 0 else None

    def observe_prefill(self, ids: list[int], logits) -> None:
        if logits is not None and self.settings.harvest:
            self.table.harvest_prefill(ids, logits)

    def candidates(self, context: list[int]) -> Candidates:
        raise NotImplementedError

    def propose(self, context: list[int]) -> Draft:
        t0 = time.perf_counter()
        self._before_root = context[-2] if len(context) > 1 else -1
        # priced at the tokens cached when it is verified
        self._pricing = self.curve.at(len(context) - 1) if self.auto and self.curve is not None else None
        self._gated = False
        cand = self.candidates(context)
        tree, keys = cand.tree, cand.keys
        info = dict(cand.info)
        if self._pricing is not None:
            if len(tree) > 1:
                tree, keys = cand.paying(self.acceptance, self._pricing, self.overhead_s)
            info["budget"] = len(tree) - 1
        info["route"] = route_of(tree)
        draft = Draft(tree=tree, info=info)
        self._last, self._keys = draft, keys
        self._t_propose = time.perf_counter() - t0
        return draft

    def paying_room(self, best: float, max_nodes: int) -> int:
        """At most how many nodes of a draft whose path probabilities are all ``best`` or less pay on this step's
        cost curve (``max_nodes`` without a curve). 0 marks the step gated: no tree is grown and its one row is
        not harvested (where nothing pays the table feeds nothing)."""
        pricing = self._pricing
        room = max_nodes if pricing is None else most_paying_nodes(best, pricing, max_nodes, self.overhead_s)
        self._gated = room == 0
        return room

    def reads_top_k(self, draft: Draft) -> int:
        """The table's successors per tree row, harvested from every verified row unless the step was gated."""
        return 0 if (self._gated and draft is self._last) else self.table.k

    def observe(self, draft: Draft, result: StepResult) -> None:
        t0 = time.perf_counter()
        tree = draft.tree
        if self.reads_top_k(draft):
            self.table.harvest_tree(tree, self._before_root, result.reads)
        self.matcher.extend(result.emitted)
        path = result.accepted
        sources = tree.sources
        for i in range(1, len(tree)):
            self.counts["offered:" + sources[i]] += 1
        for i in path[1:]:
            self.counts["accepted:" + sources[i]] += 1
        if draft is self._last and self._keys is not None:
            self.acceptance.learn(self._keys, tree.parents, path)
        self.counts["route:" + draft.info.get("route", "?")] += 1
        self.counts["steps"] += 1
        self.after_observe(draft, result)
        spent = self._t_propose + time.perf_counter() - t0
        self.overhead_s = spent if self.counts["steps"] == 1 else 0.9 * self.overhead_s + 0.1 * spent

    def after_observe(self, draft: Draft, result: StepResult) -> None:
        """Subclass hook (EMA updates, extra step facts)."""

    def stats(self) -> dict:
        out = dict(self.counts)  # running counters only: bench reports their growth per run
        out["table_rows"] = len(self.table)
        return out


def route_of(tree: DraftTree) -> str:
    if len(tree) == 1:
        return "single"
    chainish = SPINE_TAGS | {CONTEXT}
    spine = sum(1 for s in tree.sources[1:] if s in chainish)
    if spine == len(tree) - 1:
        return "chain"
    return "spine" if spine else "branch"
