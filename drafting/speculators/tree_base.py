"""What `tr`, `iso` and `goose` share: the adjacency table (harvested from every forward pass), the context
matcher, per-source acceptance counters, and ``budget=auto`` — pick, from a candidate tree, the nodes whose
estimated path probability pays for their measured verification cost (see ``drafting.budget.selection``).

Subclasses implement ``candidates(context)``, returning a ``Candidates``: a tree plus, per node, an
acceptance-statistics key and a prior acceptance probability, and the order in which nodes would be added.
"""

from __future__ import annotations

import atexit
import time
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from drafting.budget.acceptance_rates import AcceptanceStats
from drafting.budget.selection import paying_nodes
from drafting.sources.adjacency import AdjacencyCacheError, AdjacencyTable
from drafting.sources.context import SpineMatcher
from drafting.engine.tree import Draft, DraftTree
from drafting.engine.speculator import Option, Speculator, StepResult
from drafting.errors import SpecError
from drafting.sources.context import catch_up

_SCORE_EDGES = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9)


def score_bucket(score: float) -> int:
    return bisect_right(_SCORE_EDGES, score)


@dataclass
class Candidates:
    """A candidate tree with what ``budget=auto`` needs to rank its nodes."""

    tree: DraftTree
    keys: list = field(default_factory=lambda: [None])  # acceptance-statistics key per node (root: None)
    priors: list = field(default_factory=lambda: [1.0])  # prior acceptance probability per node given its parent
    best_first: bool = True  # False: keep the insertion order (isotropic trees stay balanced)
    info: dict = field(default_factory=dict)

    def add(self, token: int, parent: int, source: str, key, prior: float) -> int | None:
        """Add a node; None when the parent already has a child with that token."""
        n = len(self.tree)
        idx = self.tree.add(token, parent, source)
        if idx < n:
            return None
        self.keys.append(key)
        self.priors.append(prior)
        return idx


def cache_option() -> Option:
    return Option("", "adjacency table file: loaded when present, saved after each answer (warm starts)", str)


def harvest_window_option() -> Option:
    return Option(
        128, "prefill positions harvested, the last N (0 = every one): each costs the output layer over the "
        "vocabulary, which after a long prompt costs more than the extra table rows gain on a CPU", int,
    )


def budget_option(paper: str) -> Option:
    return Option(
        "auto", f"draft nodes per step: a number ({paper}) or auto = as many as pay on this hardware's "
        "measured verify cost curve, ranked by online acceptance estimates", int, ("auto",),
    )


class TreeSpeculator(Speculator):
    """Base of the adjacency-table tree speculators (no ``name``: not registered itself)."""

    table_k = 10

    def __init__(self, **settings):
        super().__init__(**settings)
        s = self.settings
        self.table = AdjacencyTable(k=s.get("k_table", self.table_k), bigram=s.get("bigram", True))
        self.matcher = SpineMatcher()
        self.acceptance = AcceptanceStats()
        self.curve = None  # verify cost curves (drafting.machine.cost_curve.PrefixCost), set by bind() when budget=auto
        self.overhead_s = 0.0  # EMA of the speculator's own time per step (propose + observe)
        self.counts: Counter = Counter()
        self._keys: list | None = None  # per node of the last proposed draft
        self._last: Draft | None = None
        self._before_root = -1
        self._t_propose = 0.0
        self._cache_path: Path | None = None
        if s.get("cache"):
            self.use_cache(s["cache"])

    # -- adjacency cache ---------------------------------------------------------------------------------
    def use_cache(self, path) -> None:
        """Load the adjacency table from ``path`` when it exists, and save it there after each answer."""
        path = Path(path).expanduser()
        if path.exists():
            try:
                self.table.load(path)
            except AdjacencyCacheError as exc:
                raise SpecError(str(exc)) from None
        if self._cache_path is None:
            atexit.register(self.save_cache)
        self._cache_path = path

    def save_cache(self) -> None:
        if self._cache_path is not None and self.table.vocab:
            try:
                self.table.save(self._cache_path)
            except OSError:
                pass  # a warm start is a convenience; never fail a run over it

    # -- interface ---------------------------------------------------------------------------------------
    @property
    def auto(self) -> bool:
        return self.settings.get("budget") == "auto"

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
        if not self.settings.get("harvest", True):
            return 0
        window = int(self.settings.get("harvest_window", 0))
        return window if window > 0 else None

    def observe_prefill(self, ids: list[int], logits) -> None:
        if logits is not None and self.settings.get("harvest", True):
            self.table.harvest_prefill(ids, logits)

    def candidates(self, context: list[int]) -> Candidates:
        raise NotImplementedError

    def propose(self, context: list[int]) -> Draft:
        t0 = time.perf_counter()
        self._before_root = context[-2] if len(context) > 1 else -1
        cand = self.candidates(context)
        tree, keys = cand.tree, cand.keys
        info = dict(cand.info)
        if self.auto and self.curve is not None and len(tree) > 1:
            tree, keys = self._select(cand, len(context) - 1)  # tokens cached when it is verified
            info["budget"] = len(tree) - 1
        info["route"] = route_of(tree)
        draft = Draft(tree=tree, info=info)
        self._last, self._keys = draft, keys
        self._t_propose = time.perf_counter() - t0
        return draft

    def _select(self, cand: Candidates, cached: int) -> tuple[DraftTree, list]:
        accept = [1.0] + [self.acceptance.estimate(k, p) for k, p in zip(cand.keys[1:], cand.priors[1:])]
        keep = paying_nodes(cand.tree.parents, accept, self.curve.at(cached), self.overhead_s, ranked=cand.best_first)
        return cand.tree.subtree(keep), [None] + [cand.keys[i] for i in keep]

    def observe(self, draft: Draft, result: StepResult) -> None:
        t0 = time.perf_counter()
        tree = draft.tree
        self.table.harvest_tree(tree, self._before_root, result.logits[: len(tree)])
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
    from drafting.engine.tree import CONTEXT, SPINE

    if len(tree) == 1:
        return "single"
    chainish = {SPINE, CONTEXT}
    spine = sum(1 for s in tree.sources[1:] if s in chainish)
    if spine == len(tree) - 1:
        return "chain"
    return "spine" if spine else "branch"
