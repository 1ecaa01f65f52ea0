"""PTD, progressive tree drafting: a draft forest grows inside the verification pass and feeds a trie pool.

The forest's first-level nodes form a Jacobi-like chain: slot i sits at position root + 1 + i and sees the root
and the slots before it. Every other draft node sees its ancestors (and so its slot's predecessors) and sits one
position after its parent. After each step:

- growth: each draft row's argmax becomes a child of that node (a child already carrying it moves to the
  front: the first child is the latest guess); at most ``width`` children (the oldest is cut), nothing grows
  under EOS or past ``depth``; the last slot's argmax instead extends the chain with a new slot (a slot's
  argmax equal to the next slot's token is the chain itself and grows nothing);
- pool: every draft node's subtree (and, for a slot, the chain after it) is merged into the trie of its token
  (at most ``pool`` nodes per key, the least recently touched leaf evicted); each verified guess node's
  argmax joins the trie of its token too;
- depth window: a slot whose subtree is deeper than ``depth`` is cut to its first child's subtree;
- the oldest slot is dropped once the chain is longer than ``window``.

A new generation starts from two short chains (depth 2) taken from the prompt. The guess tree, verified in
the same pass, is the trie of the last committed token.

``rows=auto`` sizes each step by what its guess tree is expected to earn, with the selection GOOSE's
``budget=auto`` uses (``Candidates.paying``): every trie node offered gets an online acceptance estimate keyed by its depth and its
rank among its siblings, nodes are ranked by path probability, and as many are verified as pay on the measured
cost curve, with up to ``riders`` draft rows riding along; a step whose guesses do not pay (or whose
trie is empty) is a plain one-row step. Drafts depend only on what earlier steps left (argmaxes of draft rows
and, under ``rows=auto``, past acceptances), never on the current step's draws, so sampled acceptance stays
exact.

``info["rows"]`` describes the forest as sent (row order): ``tokens``, ``parents`` (row index, -1 for a slot),
``depths`` (slot = 1), ``offsets``, ``slot``; after the step ``next`` (argmax per row), ``grown`` ([parent row,
token] per new node, parent -1 for a new slot) and ``pruned`` (rows removed this step).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from drafting.budget.acceptance_rates import AcceptanceStats
from drafting.sources.token_trie import TriePool
from drafting.engine.tree import Draft, DraftRows, DraftTree
from drafting.engine.speculator import Settings, StepResult, option
from drafting.errors import SpecError
from drafting.speculators.candidates import Candidates
from drafting.speculators.inmodel import AUTO_SIZES, InModelDrafter, check_rows, rows_field

GUESS = "ptd-guess"  # tree source tag: a guess from the candidate pool


def guess_tree(root: int, guesses: list[tuple[int, int]]) -> DraftTree:
    """A trie's (token, parent index) guesses, parent -1 = the root, as a draft tree; a trie has no repeated
    siblings, so node i + 1 is guesses[i]."""
    tree = DraftTree(root)
    for tok, parent in guesses:
        tree.add(tok, parent + 1, GUESS)
    return tree


def guess_key(depth: int, rank: int) -> tuple:
    return ("guess", min(depth, 6), min(rank, 2))


def guess_prior(depth: int, rank: int) -> float:
    """Before any evidence: the latest continuation is likely, an alternative sibling much less."""
    return (0.3 if depth == 1 else 0.6) if rank == 0 else 0.1


class _Node:
    __slots__ = ("token", "parent", "children", "depth")

    def __init__(self, token: int, parent: "_Node | None", depth: int):
        self.token = token
        self.parent = parent
        self.children: list[_Node] = []  # first = latest guess
        self.depth = depth

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def leaf_paths(self, prefix=()):
        if not self.children:
            if prefix:
                yield list(prefix)
            return
        for c in self.children:
            yield from c.leaf_paths(prefix + (c.token,))

    def height(self) -> int:
        return 1 + max((c.height() for c in self.children), default=0)


@dataclass(frozen=True)
class PTDSettings(Settings):
    window: int = option(4, "first-level slots kept in the Jacobi-like chain (oldest dropped each step)")
    width: int = option(4, "most children per draft node")
    depth: int = option(6, "deepest draft subtree below a slot; deeper ones slide to their first child")
    nodes: int = option(32, "most draft nodes kept in the forest")
    pool: int = option(60, "trie nodes kept per key token (the least recently touched evicted)")
    guess: int = option(16, "most guess-tree nodes verified per step")
    seed: bool = option(True, "seed the pool with n-grams of the prompt and of the text as it is committed")
    seed_n: int = option(4, "n-gram length used for seeding")
    riders: int = option(6, "rows=auto: draft rows sent along with a guess tree that pays (they grow the forest)")
    rows: int | str = rows_field()

    def __post_init__(self):
        check_rows("ptd", self.rows)
        if self.window < 1 or self.width < 1 or self.depth < 2 or self.seed_n < 2 or self.riders < 0:
            raise SpecError("ptd needs window >= 1, width >= 1, depth >= 2, seed_n >= 2 and riders >= 0.")


class ProgressiveTreeDrafting(InModelDrafter):
    name = "ptd"
    order = 70
    online_budget = False  # rows=auto sizes each step from its guesses' estimated acceptance
    summary_line = "progressive draft tree grown in the verification pass + trie candidate pool (PTD), in-model"
    settings_class = PTDSettings

    def __init__(self, **settings):
        super().__init__(**settings)
        self.pool = TriePool(self.settings.pool)
        self.slots: list[_Node] = []
        self._sent: list[_Node] = []
        self._text: list[int] = []
        self.acceptance = AcceptanceStats()
        self._guess_keys: list | None = None  # per guess-tree node of the last draft (root: None)

    # --- state ------------------------------------------------------------------------------------------
    def reset(self, context: list[int]) -> None:
        s = self.settings
        rng = random.Random(len(context))
        self.slots = []
        for _ in range(2):  # two depth-2 chains taken from the prompt
            i = rng.randrange(max(1, len(context) - 1))
            slot = _Node(context[i], None, 1)
            if i + 1 < len(context):
                slot.children.append(_Node(context[i + 1], slot, 2))
            self.slots.append(slot)
        self._sent = []
        self._text = list(context)
        if s.seed:
            self.pool.seed(context, s.seed_n)

    def forest_size(self) -> int:
        return sum(1 for slot in self.slots for _ in slot.walk())

    # --- propose ----------------------------------------------------------------------------------------
    def propose(self, context: list[int]) -> Draft:
        self._guess_keys = None
        if self.settings.rows == "auto" and self.cost is not None:
            return self._propose_paying(context)
        budget = self.step_rows(context)
        if budget <= 1:
            return self.plain(context, budget)
        s = self.settings
        forest = self.forest_size()
        guess_cap = min(s.guess, budget - 1 - min(forest, (budget - 1) // 2))
        trie = self.pool.get(context[-1])
        guesses = trie.path_first(guess_cap) if trie is not None and guess_cap > 0 else []
        tree = guess_tree(context[-1], guesses)
        return self._with_rows(tree, budget, forest)

    def _propose_paying(self, context: list[int]) -> Draft:
        """rows=auto: verify the guesses whose estimated path probability pays for their rows (plus the draft
        rows riding along); a plain step when none does."""
        budget = AUTO_SIZES[-1]
        forest = self.forest_size()
        riders = min(forest, self.settings.riders)
        trie = self.pool.get(context[-1])
        guesses = trie.path_first(min(self.settings.guess, budget - 1 - riders)) if trie is not None else []
        cand = Candidates(tree=guess_tree(context[-1], guesses))
        rank = [0] * len(cand.tree)  # children seen so far, per node
        for i in range(1, len(cand.tree)):
            p, d = cand.tree.parents[i], cand.tree.depths[i]
            cand.keys.append(guess_key(d, rank[p]))
            cand.priors.append(guess_prior(d, rank[p]))
            rank[p] += 1
        tree, keys = cand.paying(self.acceptance, self.cost.at(len(context) - 1), riders=riders)
        if len(tree) == 1:
            return self.plain(context, 1)
        self._guess_keys = keys
        return self._with_rows(tree, len(tree) + riders, forest)

    def _with_rows(self, tree: DraftTree, budget: int, forest: int) -> Draft:
        rows, sent, desc = self._rows(len(tree), budget - len(tree))
        self._sent = sent
        info = {"route": "tree", "budget": budget, "guess": len(tree) - 1, "draft_rows": len(sent),
                "forest": forest, "pool": len(self.pool), "rows": desc}
        return Draft(tree=tree, rows=rows, info=info)

    def _rows(self, t: int, room: int):
        """Slots first (the chain), then the forest breadth-first, up to ``room`` rows."""
        order: list[_Node] = list(self.slots[: max(0, room)])
        frontier = [c for slot in order for c in slot.children]
        while frontier and len(order) < room:
            take = frontier[: room - len(order)]
            order.extend(take)
            frontier = [c for n in take for c in n.children]
        row = {id(n): r for r, n in enumerate(order)}
        rows = DraftRows()
        slot_of = {}
        for r, n in enumerate(order):
            if n.parent is None:
                i = len(rows)  # slots come first, in chain order
                seen, offset, slot = [0] + [t + k for k in range(i)], 1 + i, i
            else:
                p = row[id(n.parent)]
                seen, offset, slot = rows.visible[p] + [t + p], rows.offsets[p] + 1, slot_of[p]
            slot_of[r] = slot
            rows.tokens.append(n.token)
            rows.offsets.append(offset)
            rows.visible.append(seen)
        desc = {
            "kind": "ptd",
            "tokens": list(rows.tokens),
            "parents": [-1 if n.parent is None else row[id(n.parent)] for n in order],
            "depths": [n.depth for n in order],
            "offsets": list(rows.offsets),
            "slot": [slot_of[r] for r in range(len(order))],
        }
        return rows, order, desc

    # --- observe ----------------------------------------------------------------------------------------
    def observe(self, draft: Draft, result: StepResult) -> None:
        self.learn_budget(draft, result)
        s = self.settings
        if s.seed:
            self._harvest_text(result.emitted)
        if draft.info.get("route") == "plain":
            return
        top = result.reads.argmax()  # the step's one host read: the guess tree's and the draft rows' argmaxes
        t = len(draft.tree)
        self._harvest_guesses(draft.tree, top[:t])
        keys, self._guess_keys = self._guess_keys, None
        if keys is not None and len(keys) == t:  # a priced step, not trimmed at the context's end
            self.acceptance.learn(keys, draft.tree.parents, result.accepted)
        out = top[t:] if draft.rows else []
        if not out:
            return
        sent, self._sent = self._sent, []
        row = {id(n): r for r, n in enumerate(sent)}
        grown: list[list[int]] = []
        pruned: list[_Node] = []
        room = s.nodes - self.forest_size()
        last_slot = self.slots[-1]
        new_slot = None
        for r, node in enumerate(sent):
            a = out[r]
            if a in self.eos:
                continue  # nothing grows under EOS
            if node is last_slot:
                new_slot = a
                continue
            if node.parent is None:
                i = self.slots.index(node)
                if self.slots[i + 1].token == a:
                    continue
            existing = next((c for c in node.children if c.token == a), None)
            if existing is not None:
                node.children.remove(existing)
                node.children.insert(0, existing)
                continue
            if node.depth >= s.depth + 1 or room <= 0:
                continue
            node.children.insert(0, _Node(a, node, node.depth + 1))
            grown.append([r, a])
            room -= 1
            if len(node.children) > s.width:
                pruned.extend(node.children.pop().walk())
        if new_slot is not None:
            self.slots.append(_Node(new_slot, None, 1))
            grown.append([-1, new_slot])
        self._merge_pool()
        for i, slot in enumerate(self.slots):
            if slot.height() > s.depth and slot.children:
                first = slot.children[0]
                pruned.append(slot)
                for other in slot.children[1:]:
                    pruned.extend(other.walk())
                first.parent = None
                for n in first.walk():
                    n.depth -= 1
                self.slots[i] = first
        while len(self.slots) > s.window:
            pruned.extend(self.slots.pop(0).walk())
        self.counts["draft_rows"] += len(sent)
        self.counts["guess_nodes"] += len(draft.tree) - 1
        desc = draft.info["rows"]
        desc["next"] = out
        desc["grown"] = grown
        desc["pruned"] = sorted(row[id(n)] for n in pruned if id(n) in row)

    def _merge_pool(self) -> None:
        """Every draft node's subtree goes into the trie of its token; a slot's also gets the chain after it."""
        depth = self.settings.depth
        for i, slot in enumerate(self.slots):
            chain = [n.token for n in self.slots[i + 1 : i + depth]]
            self.pool.insert(slot.token, chain)
            for node in slot.walk():
                for path in node.leaf_paths():
                    self.pool.insert(node.token, path[:depth])
        self.pool.tick()

    def _harvest_guesses(self, tree: DraftTree, nxt: list[int]) -> None:
        """A verified guess node's argmax is the model's own next token after it: keep it under its token."""
        for i in range(1, len(tree)):
            if nxt[i] not in self.eos:
                self.pool.insert(tree.tokens[i], [nxt[i]])

    def _harvest_text(self, emitted: list[int]) -> None:
        """Every n-gram ending in a newly committed token goes into the pool."""
        n = self.settings.seed_n
        text = self._text
        for tok in emitted:
            text.append(tok)
            if len(text) >= n:
                self.pool.insert(text[-n], text[-n + 1 :])
        self.pool.tick()

    def stats(self) -> dict:
        out = super().stats()
        out["pool_nodes"] = len(self.pool)
        return out
