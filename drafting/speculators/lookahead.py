"""Lookahead decoding: a Jacobi window rides in the verification pass and feeds an n-gram pool.

The window has ``w`` columns and ``n - 1`` levels. Column a's level j sits at position root + 1 + a + j and sees
the root, level 0 of the columns before it and its own column's lower levels: a column is a guessed n-gram
whose context is the first level up to it. After each step a full column yields the n-gram (its levels + the
argmax of its top level), keyed by its first token, into the pool (at most ``g`` per key, least recently used
evicted); then the column slides: its lowest level is dropped and the argmax becomes the new top. The pool's
n-grams for the last committed token form the tree verified in the same pass.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from drafting.sources.ngram_pool import NgramPool
from drafting.engine.tree import POOL, Draft, DraftRows, DraftTree
from drafting.engine.speculator import Settings, StepResult, option
from drafting.errors import SpecError
from drafting.speculators.inmodel import InModelDrafter, check_rows, rows_field


@dataclass(frozen=True)
class LookaheadSettings(Settings):
    w: int = option(7, "window columns (guessed n-grams grown in parallel)")
    n: int = option(5, "n-gram length: the window has n - 1 levels")
    g: int = option(7, "n-grams kept per key token (least recently used evicted) and verified per step")
    seed: bool = option(True, "seed the pool with n-grams of the prompt and of the text as it is committed")
    rows: int | str = rows_field()

    def __post_init__(self):
        check_rows("lookahead", self.rows)
        if self.w < 1 or self.n < 2:
            raise SpecError("lookahead needs w >= 1 and n >= 2.")


class Lookahead(InModelDrafter):
    name = "lookahead"
    order = 60
    summary_line = "Jacobi window + n-gram pool verified in the same pass (Lookahead decoding), in-model"
    settings_class = LookaheadSettings

    def __init__(self, **settings):
        super().__init__(**settings)
        s = self.settings
        self.levels = s.n - 1
        self.pool = NgramPool(s.g)
        self.columns: list[list[int]] = []  # per column, its level tokens (lowest first)
        self._text: list[int] = []

    def reset(self, context: list[int]) -> None:
        s = self.settings
        # the window starts from prompt tokens picked deterministically (Jacobi needs some initial guess)
        rng = random.Random(len(context))
        self.columns = [[context[rng.randrange(len(context))]] for _ in range(s.w)]
        self._text = list(context)
        if s.seed:
            self.pool.seed(context, s.n)

    def propose(self, context: list[int]) -> Draft:
        budget = self.step_rows(context)
        if budget <= 1:
            return self.plain(context, budget)
        root = context[-1]
        tree = DraftTree(root)
        # half of the budget to the window (whole columns, at least one), the rest to the guess tree
        depth = max(len(c) for c in self.columns)
        ncols = min(len(self.columns), max(1, (budget - 1) // (2 * depth)))
        guess_room = budget - 1 - ncols * depth
        for gram in self.pool.get(root, self.settings.g):
            parent = 0
            for tok in gram[: self.levels]:
                if len(tree) - 1 >= guess_room and tree.child(parent, tok) is None:
                    break
                parent = tree.add(tok, parent, POOL)
        ncols = min(len(self.columns), max(1, (budget - len(tree)) // depth))
        rows, where = self._window_rows(len(tree), ncols)
        info = {
            "route": "window",
            "budget": budget,
            "guess": len(tree) - 1,
            "pool": len(self.pool),
            "columns": ncols,
            "draft_rows": len(rows),
            "rows": {"kind": "lookahead", "tokens": list(rows.tokens), "offsets": list(rows.offsets),
                     "column": [a for a, _ in where], "level": [j for _, j in where]},
        }
        return Draft(tree=tree, rows=rows, info=info)

    def _window_rows(self, t: int, ncols: int) -> tuple[DraftRows, list[tuple[int, int]]]:
        rows = DraftRows()
        index: dict[tuple[int, int], int] = {}
        where = []
        for j in range(max(len(c) for c in self.columns[:ncols])):
            for a in range(ncols):
                col = self.columns[a]
                if j >= len(col):
                    continue
                seen = [0] + [index[(0, c)] for c in range(a)] + [index[(k, a)] for k in range(j)]
                index[(j, a)] = t + len(rows)
                rows.tokens.append(col[j])
                rows.offsets.append(1 + a + j)
                rows.visible.append(seen)
                where.append((a, j))
        return rows, where

    def observe(self, draft: Draft, result: StepResult) -> None:
        self.learn_budget(draft, result)
        n = self.settings.n
        for tok in result.emitted:
            self._text.append(tok)
            if self.settings.seed and len(self._text) >= n:
                self.pool.add(self._text[-n], self._text[-n + 1 :])
        out = self.row_argmax(draft, result)
        if not out:
            return
        where = draft.info["rows"]["column"], draft.info["rows"]["level"]
        top = {}
        for r, (a, j) in enumerate(zip(*where)):
            if j == len(self.columns[a]) - 1:
                top[a] = out[r]
        for a, nxt in top.items():
            col = self.columns[a]
            if len(col) == self.levels:
                self.pool.add(col[0], col[1:] + [nxt])
                col.pop(0)
            col.append(nxt)
        self.counts["draft_rows"] += len(out)
        self.counts["guess_nodes"] += len(draft.tree) - 1
        draft.info["rows"]["next"] = out
