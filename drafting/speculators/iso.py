"""GOOSE's isotropic control: a balanced k-ary tree over the same sources (context chain + adjacency table)
and the same node budget as `goose`. Each node's children are its context-chain continuation (when the node is
on the chain) followed by its adjacency successors, up to k; levels fill breadth-first. ``budget=auto`` keeps
the breadth-first order and only chooses how many nodes pay, so the tree stays isotropic."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from drafting.engine.tree import ADJACENCY, CONTEXT, DraftTree
from drafting.engine.speculator import Settings, option
from drafting.errors import SpecError
from drafting.speculators.goose import spine_key, spine_prior
from drafting.speculators.tree_base import (
    Candidates, TreeSpeculator, bigram_field, budget_field, cache_field, harvest_field, harvest_window_field,
    min_score_field, score_bucket,
)


def build_kary_tree(root: int, before_root: int, chain: list[int], conf: float, budget: int, table, *, k: int = 3,
                    min_score: float = 0.01, bigram: bool = True) -> Candidates:
    cand = Candidates(tree=DraftTree(root), best_first=False)
    queue = deque([(0, before_root, 0)])  # node, predecessor token, index into chain of its next token (-1 = off)
    added = 0
    while queue and added < budget:
        node, prev, at = queue.popleft()
        tree = cand.tree
        tok, depth = tree.tokens[node], tree.depths[node] + 1
        kids = 0
        if 0 <= at < len(chain):
            idx = cand.add(chain[at], node, CONTEXT, spine_key(conf, depth), spine_prior(conf))
            if idx is not None:
                kids += 1
                added += 1
                queue.append((idx, tok, at + 1))
        succ, scores = table.successors(prev, tok, bigram)
        for t, s in zip(succ.tolist(), scores.tolist()):
            if kids >= k or added >= budget or s < min_score:
                break
            idx = cand.add(t, node, ADJACENCY, (ADJACENCY, score_bucket(s), min(depth, 3)), 0.8 * s)
            if idx is None:
                continue
            kids += 1
            added += 1
            queue.append((idx, tok, -1))
    return cand


@dataclass(frozen=True)
class IsotropicSettings(Settings):
    k: int = option(3, "children per node")
    budget: int | str = budget_field("60 = GOOSE's 60 + 40·confidence")
    bigram: bool = bigram_field()
    harvest: bool = harvest_field()
    harvest_window: int = harvest_window_field()
    min_score: float = min_score_field()
    cache: str = cache_field()

    def __post_init__(self):
        if self.k < 1:
            raise SpecError("iso needs k >= 1.")


class Isotropic(TreeSpeculator):
    name = "iso"
    order = 40
    summary_line = "isotropic control: balanced k-ary tree over the context chain + adjacency table, GOOSE's budget"
    settings_class = IsotropicSettings

    def candidates(self, context: list[int]) -> Candidates:
        s = self.settings
        m = self.matcher.spine()
        base = 60 if self.auto else int(s.budget)
        budget = base + math.floor(40 * m.confidence)
        cand = build_kary_tree(context[-1], self._before_root, m.chain, m.confidence, budget, self.table,
                               k=s.k, min_score=s.min_score, bigram=s.bigram)
        cand.info = {"budget": budget, "confidence": round(m.confidence, 3)}
        return cand
