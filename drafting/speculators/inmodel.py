"""What Lookahead and PTD share: a row budget per forward (fixed, or ``auto`` from the measured verify cost
curve and the tokens steps actually produced), EOS ids, and the argmaxes of the draft rows.

``rows`` counts every row of the forward (root + guess tree + draft rows). With ``auto`` the budget is chosen
per step among a few sizes by ``drafting.budget.selection.OnlineBudget`` (Lookahead); where no size beats plain decoding
the step is plain (one row) and the draft state waits, with an occasional probe. A subclass that can estimate
what its guesses will earn sizes its steps itself (PTD, ``online_budget = False``) from the same cost curves.
"""

from __future__ import annotations

from drafting.budget.online import OnlineBudget
from drafting.engine.tree import Draft, DraftTree
from drafting.engine.speculator import Speculator, StepResult, option
from drafting.errors import SpecError

AUTO_SIZES = (8, 16)  # past 16 rows the cost curve climbs faster than in-model drafts gain here


def rows_field():
    """The ``rows`` setting both in-model drafters declare (last, as their specs have always written it)."""
    return option(
        "auto",
        "rows per forward, root + guess tree + draft rows (auto: the size that pays on the measured cost curve, "
        "down to plain steps)",
        int,
        ("auto",),
    )


def check_rows(name: str, rows) -> None:
    if rows != "auto" and rows < 1:
        raise SpecError(f"{name} needs rows >= 1 (1 = plain steps) or rows=auto.")


class InModelDrafter(Speculator):
    """Base for speculators whose drafts are argmaxes of extra rows in the verification pass; their settings
    declare ``rows`` (``rows_field``, checked by ``check_rows``)."""

    draws_rows = True
    reads_argmax = True  # the draft rows' argmaxes are their next drafts
    online_budget = True  # rows=auto picks among AUTO_SIZES by measured tokens per step (False: the subclass sizes steps itself)

    def __init__(self, **settings):
        super().__init__(**settings)
        self.eos: set[int] = set()
        self.budget: OnlineBudget | None = None
        self.cost = None  # verify cost curves (drafting.machine.cost_curve.PrefixCost), set by bind() when rows=auto
        self.counts = {"steps": 0, "plain_steps": 0, "draft_rows": 0, "guess_nodes": 0, "accepted": 0}

    def bind(self, lm) -> None:
        self.eos = set(lm.eos_ids)
        if self.settings.rows == "auto" and self.cost is None and lm.verify_cost is not None:
            self.cost = lm.verify_cost()
            if self.online_budget:
                self.budget = OnlineBudget(self.cost.short, AUTO_SIZES)

    def step_rows(self, context: list[int]) -> int:
        """The row budget of the next step, verified after ``len(context) - 1`` cached tokens."""
        rows = self.settings.rows
        if rows != "auto":
            return rows
        if self.budget is None:  # never bound to a model: behave like the middle size
            return AUTO_SIZES[0]
        self.budget.curve = self.cost.at(len(context) - 1)
        return self.budget.choose()

    def plain(self, context: list[int], rows: int) -> Draft:
        self.counts["plain_steps"] += 1
        return Draft(tree=DraftTree(context[-1]), info={"route": "plain", "budget": rows})

    def learn_budget(self, draft: Draft, result: StepResult) -> None:
        """Credit the tokens of this step to the row budget that produced them."""
        self.counts["steps"] += 1
        self.counts["accepted"] += len(result.accepted) - 1
        if self.budget is not None and draft.info.get("route") != "plain" and not draft.info.get("trimmed"):
            self.budget.update(draft.info.get("budget", 1), len(result.emitted))

    @staticmethod
    def row_argmax(draft: Draft, result: StepResult) -> list[int]:
        """Argmax token of every draft row (from the step's one host read); empty when the rows were dropped."""
        if not draft.rows:
            return []
        return result.reads.argmax()[len(draft.tree) :]

    def stats(self) -> dict:
        out = dict(self.counts)
        if self.budget is not None:
            out.update(self.budget.state())
        return out
