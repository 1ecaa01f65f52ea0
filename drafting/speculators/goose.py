"""GOOSE: anisotropic spine trees.

The context-match chain is laid first as one deep path (the spine); adjacency-table successors hang off the
root (root alternatives) and off spine nodes (spine branches, budget weighted 1/i by spine position), each
BFS-extended with a width that falls with depth. The match's confidence sizes the budget (60 + 40·conf) and
the spine's share (base ratio from the spine-acceptance EMA tiers, pulled towards 1 by confidence); at full
confidence the whole budget goes to the spine (bypass: a plain chain). Routes per step: spine tree,
branch-only tree (no match), plain chain (bypass), single step (nothing to draft).

Ablation switches (the paper's four): ``rho=0`` (no spine branches), ``bigram=off``, ``confidence=off`` (fixed
budget and ratio, no bypass, no chain extension), ``harvest=off`` (no prefill harvest). ``budget=60``
reproduces the paper's fixed budget; the default ``budget=auto`` drafts only what pays on this hardware.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from drafting.budget.selection import most_paying_nodes
from drafting.engine.tree import ROOT_ALT, SPINE, SPINE_BRANCH, DraftTree
from drafting.engine.speculator import Settings, StepResult, option
from drafting.speculators.tree_base import (
    Candidates, TreeSpeculator, bigram_field, budget_field, cache_field, harvest_field, harvest_window_field,
    min_score_field, score_bucket,
)

EMA_ALPHA = 0.3


@dataclass
class SpinePlan:
    budget: int  # draft nodes, root excluded
    spine: int  # spine nodes
    branch: int  # nodes for spine branches
    root: int  # nodes for root alternatives
    bypass: bool


def base_ratio(ema: float) -> float:
    """Spine share from the spine-acceptance EMA tiers."""
    return 0.15 if ema < 0.2 else 0.30 if ema < 0.4 else 0.50


def plan_budget(chain_len: int, conf: float, ema: float, base: int = 60, rho: float = 0.5,
                use_confidence: bool = True, full_spine: bool = False) -> SpinePlan:
    """The paper's split of the node budget between spine, spine branches and root alternatives.

    ``full_spine`` (candidates for ``budget=auto``) lays the whole chain up to the budget and keeps the
    paper's branch budgets on top, leaving the pruning to the cost rule."""
    c = conf if use_confidence else 0.0
    budget = base + math.floor(40 * c)
    if use_confidence and conf >= 1.0 and chain_len:
        return SpinePlan(budget, min(chain_len, budget), 0, 0, True)
    b = base_ratio(ema)
    ratio = b + c * (1 - b)
    spine = min(chain_len, math.floor(budget * ratio))
    rest = budget - spine
    branch = math.floor(rho * rest) if spine else 0
    if full_spine:
        spine = min(chain_len, budget)
    return SpinePlan(budget, spine, branch, rest - branch, False)


def spine_key(conf: float, depth: int):
    return ("spine", min(5, int(conf * 5)), min(depth, 12))


def spine_prior(conf: float) -> float:
    return 0.3 + 0.6 * conf


BRANCH_SCORES = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9, 1.0)  # the top of each score bucket (tree_base)


def branch_key(source: str, score: float, level: int):
    return (source, score_bucket(score), min(level, 3))


def branch_prior(score: float) -> float:
    return 0.8 * score


def grow_branch(cand: Candidates, table, start: int, before: int, budget: int, source: str, *, k: int = 10,
                min_score: float = 0.01, max_depth: int = 6, bigram: bool = True) -> int:
    """BFS from node ``start`` adding at most ``budget`` adjacency successors; returns the nodes added.

    A node at branch level L gets at most max(1, min(#successors, ceil(remaining * path score))) children,
    capped at max(1, floor(k / L)); successors scoring below ``min_score`` are dropped; levels <= ``max_depth``."""
    tree = cand.tree
    added = 0
    queue = deque([(start, before, 1.0, 0)])  # node, its predecessor token, path score, branch level
    while queue and added < budget:
        node, prev, path_score, level = queue.popleft()
        if level >= max_depth:
            continue
        tok = tree.tokens[node]
        succ, scores = table.successors(prev, tok, bigram)
        n = int((scores >= min_score).sum())
        if n == 0:
            continue
        remaining = budget - added
        width = min(n, math.ceil(remaining * path_score), max(1, k // (level + 1)))
        width = max(1, width)
        for j in range(width):
            s = float(scores[j])
            idx = cand.add(int(succ[j]), node, source, branch_key(source, s, level + 1), branch_prior(s))
            if idx is None:  # the spine (or a sibling) already holds this token
                continue
            added += 1
            queue.append((idx, tok, path_score * s, level + 1))
            if added >= budget:
                break
    return added


def build_spine_tree(root: int, before_root: int, chain: list[int], conf: float, plan: SpinePlan, table, *,
                     k: int = 10, min_score: float = 0.01, max_depth: int = 6, bigram: bool = True) -> Candidates:
    """Spine first, then root alternatives, then spine branches (weights 1/i over spine positions)."""
    cand = Candidates(tree=DraftTree(root))
    spine_nodes = []
    parent = 0
    for d, tok in enumerate(chain[: plan.spine], start=1):
        parent = cand.add(tok, parent, SPINE, spine_key(conf, d), spine_prior(conf))
        spine_nodes.append(parent)
    opts = dict(k=k, min_score=min_score, max_depth=max_depth, bigram=bigram)
    if plan.root:
        grow_branch(cand, table, 0, before_root, plan.root, ROOT_ALT, **opts)
    if plan.branch and spine_nodes:
        weights = [1.0 / i for i in range(1, len(spine_nodes) + 1)]
        total = sum(weights)
        left = plan.branch
        for i, node in enumerate(spine_nodes):
            share = min(left, max(0, round(plan.branch * weights[i] / total)))
            if share <= 0:
                continue
            prev = cand.tree.tokens[cand.tree.parents[node]]
            left -= grow_branch(cand, table, node, prev, share, SPINE_BRANCH, **opts)
    return cand


@dataclass(frozen=True)
class GooseSettings(Settings):
    budget: int | str = budget_field("60 = the paper's 60 + 40·confidence")
    rho: float = option(0.5, "share of the non-spine budget hung on spine branches (0 = the no-branches ablation)")
    bigram: bool = bigram_field()
    confidence: bool = option(True, "confidence-adaptive budget, spine ratio and bypass (off = fixed, ablation)")
    harvest: bool = harvest_field("off = ablation")
    harvest_window: int = harvest_window_field()
    k: int = option(10, "adjacency successors kept per token")
    min_score: float = min_score_field()
    depth: int = option(6, "deepest branch level")
    chain: int = option(20, "context chain length (extended up to chain_max by re-matching when confident)")
    chain_max: int = option(100, "longest extended context chain")
    cache: str = cache_field()


class Goose(TreeSpeculator):
    name = "goose"
    order = 50
    summary_line = "GOOSE anisotropic spine tree: context chain as spine + adjacency branches, confidence-adaptive"
    settings_class = GooseSettings

    def __init__(self, **settings):
        super().__init__(**settings)
        s = self.settings
        self.matcher.chain_len, self.matcher.chain_max = s.chain, s.chain_max
        self.ema = 0.5
        self._spine: tuple[list[int], float] = ([], 0.0)  # the last candidate spine and its match confidence

    def table_size(self) -> int:
        return self.settings.k

    def reset(self, context: list[int]) -> None:
        super().reset(context)
        self.ema = 0.5

    def candidates(self, context: list[int]) -> Candidates:
        s = self.settings
        use_conf = s.confidence
        m = self.matcher.spine(extend=use_conf)
        base = 60 if self.auto else int(s.budget)
        plan = plan_budget(len(m.chain), m.confidence, self.ema, base, s.rho, use_conf, full_spine=self.auto)
        self._spine = (m.chain[: plan.spine], m.confidence)
        room = self.paying_room(self.best_first_node(context[-1], m, plan), plan.budget)
        if room:
            cand = build_spine_tree(
                context[-1], self._before_root, m.chain, m.confidence, plan, self.table,
                k=s.k, min_score=s.min_score, max_depth=s.depth, bigram=s.bigram,
            )
        else:  # on this step's cost curve no tree under these first nodes pays: skip growing it
            cand = Candidates(tree=DraftTree(context[-1]))
        cand.info = {"budget": plan.budget, "confidence": round(m.confidence, 3), "ema": round(self.ema, 3),
                     "bypass": int(plan.bypass), "chain": len(m.chain)}
        return cand

    @property
    def prefill_logit_rows(self) -> int | None:
        """None of the prompt's logits where no root alternative could pay on the cost curve (a CPU's llama.cpp):
        each harvested row costs the output layer over the vocabulary, 0.1 s a prompt on the embedded model and
        over 1 s on a 1.5B one with a 150k vocabulary, for table rows no step would draft."""
        rows = super().prefill_logit_rows
        if rows != 0 and self.auto and self.curve is not None:
            best = max(self.acceptance.estimate(branch_key(ROOT_ALT, score, 1), branch_prior(score))
                       for score in BRANCH_SCORES)
            if not most_paying_nodes(best, self.curve.at(0), self.settings.k, self.overhead_s):
                return 0
        return rows

    def best_first_node(self, root: int, m, plan: SpinePlan) -> float:
        """The highest acceptance estimate among the nodes the tree would hang off its root (the spine's first,
        the root alternatives): every node's path probability is at most that."""
        s = self.settings
        best = 0.0
        if plan.spine:
            best = self.acceptance.estimate(spine_key(m.confidence, 1), spine_prior(m.confidence))
        if plan.root:
            succ, scores = self.table.successors(self._before_root, root, s.bigram)
            for score in scores[: s.k]:
                if score >= s.min_score:
                    best = max(best, self.acceptance.estimate(branch_key(ROOT_ALT, score, 1), branch_prior(score)))
        return best

    def learn_undrafted_spine(self, drafted: int, path: list[int], sources: list[str], emitted: list[int]) -> None:
        """Where the budget cut the spine and every drafted spine node was accepted, the step's bonus token says
        whether the first spine node left out would have been: counted like a tested node, so a spine priced out
        on a steep cost curve still teaches the rates that may later price it in."""
        chain, conf = self._spine
        whole_spine = len(path) == drafted and all(sources[i] == SPINE for i in path)
        if whole_spine and drafted < len(chain) and drafted < len(emitted):
            self.acceptance.update(spine_key(conf, drafted + 1), chain[drafted] == emitted[drafted])

    def after_observe(self, draft, result: StepResult) -> None:
        sources = draft.tree.sources
        spine = sum(1 for x in sources if x == SPINE)
        path = result.accepted[1:]
        if spine:
            got = sum(1 for i in path if sources[i] == SPINE)
            self.ema = (1 - EMA_ALPHA) * self.ema + EMA_ALPHA * (got / spine)
        if draft is self._last:
            self.learn_undrafted_spine(spine, path, sources, result.emitted)
        cont = sum(1 for i in path if sources[i] == SPINE_BRANCH)
        draft.info["spine_continuation"] = cont
        self.counts["spine_continuation"] += cont
        self.counts["bypass"] += draft.info.get("bypass", 0)
        self.counts["budget_sum"] += len(draft.tree) - 1
