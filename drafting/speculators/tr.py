"""Token Recycling: the adjacency table's successors laid out on a static 80-node, 6-level template
(8/21/25/15/8/3 nodes per level); higher-ranked candidates get more and deeper children.

The template is built once: level by level, each slot is (parent slot, successor rank) and the slots kept are
those with the largest rank prior product, so rank-0 chains reach depth 6 while low ranks stay leaves.
``budget=80`` is TR as published; ``budget=auto`` keeps only the template nodes that pay on this hardware."""

from __future__ import annotations

from dataclasses import dataclass

from drafting.engine.tree import ADJACENCY, DraftTree
from drafting.engine.speculator import Settings
from drafting.speculators.tree_base import (
    Candidates, TreeSpeculator, bigram_field, budget_field, cache_field, harvest_field, harvest_window_field,
    score_bucket,
)

LEVELS = (8, 21, 25, 15, 8, 3)
# rough acceptance of the r-th ranked successor; only its ordering shapes the template
_RANK_PRIOR = (0.45, 0.15, 0.08, 0.05, 0.04, 0.03, 0.025, 0.02)


def static_template(levels=LEVELS, width: int = 8) -> list[tuple[int, int]]:
    """(parent slot, rank) per slot in level order; slot -1 is the root."""
    slots: list[tuple[int, int]] = []
    weight: list[float] = []
    frontier = [(-1, 1.0)]
    for size in levels:
        options = [(w * _RANK_PRIOR[r], p, r) for p, w in frontier for r in range(min(width, len(_RANK_PRIOR)))]
        options.sort(key=lambda o: (-o[0], o[1], o[2]))
        chosen = sorted(options[:size], key=lambda o: (o[1], o[2]))
        frontier = []
        for w, p, r in chosen:
            slots.append((p, r))
            weight.append(w)
            frontier.append((len(slots) - 1, w))
    return slots


TEMPLATE = static_template()


def build_template_tree(root: int, before_root: int, table, budget: int, template=TEMPLATE,
                        bigram: bool = False) -> Candidates:
    cand = Candidates(tree=DraftTree(root))
    node_of: list[int | None] = []
    succ_cache: dict[int, tuple] = {}
    for parent_slot, rank in template:
        if len(cand.tree) - 1 >= budget:
            break
        parent = 0 if parent_slot < 0 else node_of[parent_slot]
        if parent is None:
            node_of.append(None)
            continue
        if parent not in succ_cache:
            tree = cand.tree
            prev = before_root if parent == 0 else tree.tokens[tree.parents[parent]]
            succ_cache[parent] = table.successors(prev, tree.tokens[parent], bigram)
        succ, scores = succ_cache[parent]
        if rank >= len(succ):
            node_of.append(None)
            continue
        s = float(scores[rank])
        depth = cand.tree.depths[parent] + 1
        node_of.append(cand.add(int(succ[rank]), parent, ADJACENCY, (ADJACENCY, score_bucket(s), min(depth, 3)), 0.8 * s))
    return cand


@dataclass(frozen=True)
class TokenRecyclingSettings(Settings):
    budget: int | str = budget_field("80 = the published static tree")
    bigram: bool = bigram_field(False, "GOOSE's addition; TR has none")
    harvest: bool = harvest_field()
    harvest_window: int = harvest_window_field()
    cache: str = cache_field()


class TokenRecycling(TreeSpeculator):
    name = "tr"
    order = 30
    summary_line = "Token Recycling: adjacency-table successors on a static 80-node, 6-level tree"
    table_k = 8
    settings_class = TokenRecyclingSettings

    def candidates(self, context: list[int]) -> Candidates:
        budget = len(TEMPLATE) if self.auto else int(self.settings.budget)
        cand = build_template_tree(context[-1], self._before_root, self.table, budget, bigram=self.settings.bigram)
        cand.info = {"budget": budget}
        return cand
