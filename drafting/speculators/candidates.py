"""A candidate draft tree with what the budget rule needs to price its nodes, and the pick of the nodes that pay.

``budget=auto`` (goose, iso, tr) and PTD's ``rows=auto`` both draft a candidate tree first, then verify only
the nodes whose estimated path probability pays for their measured verification cost
(``drafting.budget.selection.paying_nodes``); ``Candidates.paying`` is that step for both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drafting.budget.acceptance_rates import AcceptanceStats
from drafting.budget.selection import paying_nodes
from drafting.engine.tree import DraftTree


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

    def paying(self, acceptance: AcceptanceStats, curve, overhead_s: float = 0.0,
               riders: int = 0) -> tuple[DraftTree, list]:
        """The subtree of the nodes worth verifying on ``curve`` (a ``CostCurve``) with their keys (root: None);
        each node is priced by its online acceptance estimate (its prior before any evidence); ``riders`` rows
        that earn nothing this step ride along whenever a node is kept. Just the root when none pays."""
        accept = [1.0] + [acceptance.estimate(k, p) for k, p in zip(self.keys[1:], self.priors[1:])]
        keep = paying_nodes(self.tree.parents, accept, curve, overhead_s, riders=riders, ranked=self.best_first)
        return self.tree.subtree(keep), [None] + [self.keys[i] for i in keep]
