"""GOOSE: anisotropic spine trees.

The context-match chain is laid first as one deep path (the spine); adjacency-table successors hang off the
root (root alternatives) and off spine nodes (spine branches, budget weighted 1/i by spine position), each
BFS-extended with a width that falls with depth. The match's confidence sizes the budget (60 + 40·conf) and
the spine's share (base ratio from the spine-acceptance EMA tiers, pulled towards 1 by confidence); at full
confidence the whole budget goes to the spine (bypass: a plain chain). Routes per step: spine tree,
branch-only tree (no match), plain chain (bypass), single step (nothing to draft).

Two more chain sources compete for the spine: the memory of earlier outputs (drafting.sources.output_memory:
what followed the longest suffix of the text in this speculator's earlier answers) and the text so far read the
same way (the continuation most earlier occurrences of its longest suffix agree on, where the context matcher
follows the most recent one). The chain expected to get most tokens accepted (by the acceptance learned for
each source, match kind and depth) is laid as the spine, and the next one hangs off the root as a chain of its
own, sharing the spine's nodes where they agree. The step info names the spine's source (``spine_source``:
context, own, memory or none).

Ablation switches (the paper's four): ``rho=0`` (no spine branches), ``bigram=off``, ``confidence=off`` (fixed
budget and ratio, no bypass, no chain extension), ``harvest=off`` (no prefill harvest). ``budget=60``
reproduces the paper's fixed budget; the default ``budget=auto`` drafts only what pays on this hardware.
"""

from __future__ import annotations

import math
from collections import deque
from itertools import islice
from dataclasses import dataclass

from drafting.budget.acceptance_rates import AcceptanceStats
from drafting.budget.selection import chain_pays
from drafting.engine.tree import (
    ALIGNED, CONTEXT, MEMORY, OWN_TEXT, ROOT_ALT, SPINE, SPINE_BRANCH, SPINE_TAGS, DraftTree,
)
from drafting.engine.speculator import Settings, StepResult, option
from drafting.errors import SpecError
from drafting.sources.aligned import HELD, NO_ALIGNMENT, AlignedText, Alignment, chain_plan
from drafting.sources.context import match_confidence
from drafting.sources.output_memory import MAX_MATCH, NO_MEMORY, MemoryMatch, OutputMemory, TextMemory, match_bucket
from drafting.speculators.follows_text import FollowsText
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


def memory_key(match: int, share: float, depth: int, source: str = MEMORY):
    """Acceptance key of a memory chain's node: the matched length (bucketed), the share of the earlier
    occurrences that continue along it, its depth."""
    return (source, match_bucket(match), score_bucket(share), min(depth, 12))


def memory_prior(share: float, support: int) -> float:
    """A node's acceptance before any evidence: its share of the occurrences, discounted where there were few
    (one earlier occurrence says little)."""
    return 0.2 + 0.6 * share * support / (support + 1)


# The own text's n-grams: no single tokens here, unlike inside vLLM (goose_chain.py): a one-token match took the
# spine from the root alternatives (the model's own harvested predictions) and cost speed on mixed_small.
OWN_KEYS = (4, 2)

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


@dataclass
class Chain:
    """A candidate chain with the acceptance key and prior of each of its nodes (depth 1 first)."""

    tokens: list[int]
    keys: list | tuple  # read only: an aligned chain's are the cached tuples of sources.aligned.chain_plan
    priors: list[float] | tuple
    source: str  # its tag where it is not the spine

    def expected(self, acceptance, n: int) -> float:
        """Tokens of its first ``n`` expected to be accepted, on the acceptance learned so far."""
        total, path = 0.0, 1.0
        for key, prior in zip(self.keys[:n], self.priors[:n]):
            path *= acceptance.estimate(key, prior)
            total += path
        return total


def context_chain(chain: list[int], conf: float) -> Chain:
    return Chain(list(chain), [spine_key(conf, d) for d in range(1, len(chain) + 1)], [spine_prior(conf)] * len(chain),
                 CONTEXT)


def memory_chain(found: MemoryMatch, source: str = MEMORY) -> Chain:
    shares = found.shares
    return Chain(list(found.chain), [memory_key(found.match, sh, d, source) for d, sh in enumerate(shares, 1)],
                 [memory_prior(sh, found.support) for sh in shares], source)


def aligned_chain(found: Alignment) -> Chain:
    """The lookup's own slice and the cached keys and priors as they are: read, never changed, so not copied."""
    keys, priors = chain_plan(found.kind, len(found.chain))
    return Chain(found.chain, keys, priors, ALIGNED)


def aligned_confidence(found: Alignment) -> float:
    """The context rule's confidence for a chain of its length, nothing while it only offers the way back."""
    return match_confidence(len(found.chain), False) if found.state == HELD else 0.0


def hang_chain(cand: Candidates, chain: Chain, most: int) -> int:
    """Hang at most ``most`` new nodes of ``chain`` off the root, along the nodes already there where they agree
    (the spine's, usually); returns the nodes added."""
    parent, added = 0, 0
    for tok, key, prior in zip(chain.tokens, chain.keys, chain.priors):
        idx = cand.add(tok, parent, chain.source, key, prior)
        if idx is None:
            idx = cand.tree.child(parent, tok)
        else:
            added += 1
            if added >= most:
                break
        parent = idx
    return added


def build_spine_tree(root: int, before_root: int, chain: list[int] | Chain, conf: float, plan: SpinePlan, table, *,
                     k: int = 10, min_score: float = 0.01, max_depth: int = 6, bigram: bool = True,
                     side: Chain | None = None, priced: bool = False, most: int | None = None) -> Candidates:
    """Spine first, then the ``side`` chain (the other chain source) and the root alternatives, then spine branches
    (weights 1/i over spine positions). The side chain takes up to half the root alternatives' budget, or
    (``priced``: the cost rule picks the nodes after) comes on top of them whole. Neither the spine nor the side
    chain is laid longer than ``most`` nodes (no paying draft holds more: the rest would only be priced out)."""
    cand = Candidates(tree=DraftTree(root))
    spine = chain if isinstance(chain, Chain) else context_chain(chain, conf)
    spine_nodes = []
    parent = 0
    tag = ALIGNED if spine.source == ALIGNED else SPINE  # an aligned spine keeps its own colour and counts
    laid = plan.spine if most is None else min(plan.spine, most)
    for tok, key, prior in islice(zip(spine.tokens, spine.keys, spine.priors), laid):
        parent = cand.add(tok, parent, tag, key, prior)
        spine_nodes.append(parent)
    opts = dict(k=k, min_score=min_score, max_depth=max_depth, bigram=bigram)
    root_budget = plan.root
    if side is not None and side.tokens and priced:
        hang_chain(cand, side, len(side.tokens) if most is None else min(len(side.tokens), most))
    elif side is not None and side.tokens and root_budget > 0:
        root_budget -= hang_chain(cand, side, max(1, root_budget // 2))
    if root_budget > 0:
        grow_branch(cand, table, 0, before_root, root_budget, ROOT_ALT, **opts)
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
    memory: int = option(1 << 19, "tokens of earlier answers remembered as a chain source competing for the spine "
                                  "(the oldest forgotten first); 0 = no memory (the paper's GOOSE)")
    own: bool = option(True, "read the text so far as a memory too (the continuation most earlier occurrences of its "
                             "longest suffix agree on), competing for the spine (off = the paper's GOOSE)")
    aligned: bool = option(True, "follow the text the answer is copying (an edited file, an earlier answer) with a "
                                 "pointer that re-aligns after every edit, competing for the spine (off = the paper's "
                                 "GOOSE)")
    cache: str = cache_field()


class Goose(FollowsText, TreeSpeculator):
    name = "goose"
    order = 50
    summary_line = "GOOSE anisotropic spine tree: context chain as spine + adjacency branches, confidence-adaptive"
    settings_class = GooseSettings

    def __init__(self, **settings):
        super().__init__(**settings)
        s = self.settings
        self.matcher.chain_len, self.matcher.chain_max = s.chain, s.chain_max
        self.ema = 0.5
        self._spine: Chain = Chain([], [], [], SPINE)  # the last candidate spine
        self._side: Chain | None = None  # the last candidate chain that was not the spine
        self._root_alts: list[tuple[int, tuple]] = []  # the last step's root alternatives: (token, acceptance key)
        # every step's root alternatives scored against its first emitted token, drafted or not: what the prefill
        # harvest is worth. Kept apart from the tree's rates, which are those of the steps that drafted them (a
        # step whose spine is right rejects every alternative, and pricing trees by that would draft too few)
        self.root_rates = AcceptanceStats()
        if s.memory < 0:
            raise SpecError(f"goose's memory must be 0 or more tokens, not {s.memory}.")
        # this speculator's own earlier answers: never shared with another speculator instance
        self.memory = OutputMemory(max_tokens=s.memory) if s.memory else None
        self._answer: int | None = None  # the answer being written, in the memory
        self._own: TextMemory | None = None  # the text so far, indexed as a memory (own=on)

    def table_size(self) -> int:
        return self.settings.k

    def reset(self, context: list[int]) -> None:
        super().reset(context)
        self.ema = 0.5
        self._start_answer()
        self._own = None
        self.align(context)

    def own_text(self, context: list[int]) -> TextMemory | None:
        """The text so far indexed as a memory, brought up to ``context`` (built anew where it is shorter than
        what was indexed: a new prompt)."""
        if not self.settings.own:
            return None
        if self._own is None or len(context) < len(self._own.text):
            self._own = TextMemory(OWN_KEYS)
        self._own.extend(context[len(self._own.text):])
        return self._own

    def resume(self, context: list[int]) -> bool:
        if not super().resume(context):
            return False
        self._start_answer()
        self.align(context)
        return True

    def _start_answer(self) -> None:
        """A new prompt (or turn): what follows is a new answer, remembered as it is written."""
        if self.memory is not None:
            self._answer = self.memory.open()

    def remember(self, emitted: list[int]) -> None:
        if self.memory is not None and self._answer is not None:
            self.memory.extend(self._answer, emitted)

    def recall(self, context: list[int], limit: int) -> MemoryMatch:
        """The earlier answers' continuation of ``context`` (not the answer being written: the context has it)."""
        if self.memory is None:
            return NO_MEMORY
        return self.memory.lookup(context[-MAX_MATCH - 1:], limit, exclude=self._answer)

    def candidates(self, context: list[int]) -> Candidates:
        s = self.settings
        use_conf = s.confidence
        m = self.matcher.spine(extend=use_conf)
        base = 60 if self.auto else int(s.budget)
        own = self.own_text(context)
        own_found = own.lookup(s.chain) if own is not None else NO_MEMORY
        aligned = self.aligned.lookup(s.chain_max) if self.aligned is not None else NO_ALIGNMENT
        spine, side, conf = self.pick_spine(m, self.recall(context, s.chain), base, own_found, aligned)
        plan = plan_budget(len(spine.tokens), conf, self.ema, base, s.rho, use_conf, full_spine=self.auto)
        self._spine = Chain(spine.tokens[: plan.spine], spine.keys, spine.priors, SPINE)
        self._side = side
        room = self.paying_room(self.best_first_node(context[-1], spine, side, plan), plan.budget)
        if room:
            priced = self._pricing is not None
            cand = build_spine_tree(
                context[-1], self._before_root, spine, conf, plan, self.table,
                k=s.k, min_score=s.min_score, max_depth=s.depth, bigram=s.bigram, side=side,
                priced=priced, most=room if priced else None,
            )
        else:  # on this step's cost curve no tree under these first nodes pays: skip growing it
            cand = Candidates(tree=DraftTree(context[-1]))
        cand.info = {"budget": plan.budget, "confidence": round(conf, 3), "ema": round(self.ema, 3),
                     "bypass": int(plan.bypass), "chain": len(spine.tokens),
                     "spine_source": spine.source if spine.tokens else "none"}
        if self.aligned is not None:
            cand.info.update(aligned_info(self.aligned))
        return cand

    def pick_spine(self, m, found: MemoryMatch, base: int, own: MemoryMatch = NO_MEMORY,
                   aligned: Alignment = NO_ALIGNMENT) -> tuple[Chain, Chain | None, float]:
        """(spine, side chain, confidence): of the aligned text's chain, the context's, the own text's and the
        memory's, the one expected to get most tokens accepted is the spine (in that order on a tie) and the next
        one the side chain; a memory spine's confidence is the context rule's for its length and agreement, so a
        consensus of earlier occurrences is drafted whole too."""
        ctx = context_chain(m.chain, m.confidence)
        ranked = [(aligned_chain(aligned), aligned_confidence(aligned))] if aligned.chain else []
        if ctx.tokens:
            ranked.append((ctx, m.confidence))
        for match, source in ((own, OWN_TEXT), (found, MEMORY)):
            if match.chain:
                ranked.append((memory_chain(match, source), match_confidence(len(match.chain), match.consensus)))
        if len(ranked) > 1:
            span = max(1, min(base, 16))  # compared over the depth a spine is mostly verified at
            ranked.sort(key=lambda c: -c[0].expected(self.acceptance, span))  # stable: the order above on a tie
        if not ranked:
            return ctx, None, m.confidence
        return ranked[0][0], (ranked[1][0] if len(ranked) > 1 else None), ranked[0][1]

    @property
    def prefill_logit_rows(self) -> int | None:
        """None of the prompt's logits where no root alternative could pay on the cost curve (a CPU's llama.cpp):
        each harvested row costs the output layer over the vocabulary, 0.1 s a prompt on the embedded model and
        over 1 s on a 1.5B one with a 150k vocabulary, for table rows no step would draft. Root alternatives are
        siblings (one at most is accepted), so the most they earn is a chain's at the best one's rate; the rates
        are ``root_rates`` of the score buckets the table has offered, or the priors before any was."""
        rows = super().prefill_logit_rows
        if rows != 0 and self.auto and self.curve is not None:
            keys = {score: branch_key(ROOT_ALT, score, 1) for score in BRANCH_SCORES}
            seen = [score for score, key in keys.items() if self.root_rates.tested(key)] or list(keys)
            best = max(self.root_rates.estimate(keys[score], branch_prior(score)) for score in seen)
            if not chain_pays(best, self.curve.at(0), self.settings.depth, self.overhead_s):
                return 0
        return rows

    def best_first_node(self, root: int, spine: Chain, side: Chain | None, plan: SpinePlan) -> float:
        """The highest acceptance estimate among the nodes the tree would hang off its root (the spine's first,
        the side chain's, the root alternatives): every node's path probability is at most that."""
        s = self.settings
        best = 0.0
        self._root_alts = []
        if plan.spine:
            best = self.acceptance.estimate(spine.keys[0], spine.priors[0])
        if side is not None and side.tokens:
            best = max(best, self.acceptance.estimate(side.keys[0], side.priors[0]))
        if plan.root:
            succ, scores = self.table.successors(self._before_root, root, s.bigram)
            for tok, score in zip(succ[: s.k].tolist(), scores[: s.k].tolist()):
                if score >= s.min_score:
                    key = branch_key(ROOT_ALT, score, 1)
                    if self.auto:  # only the harvest gate reads them, and only under budget=auto
                        self._root_alts.append((tok, key))
                    best = max(best, self.acceptance.estimate(key, branch_prior(score)))
        return best

    def learn_undrafted_spine(self, drafted: int, path: list[int], sources: list[str], emitted: list[int]) -> None:
        """Where the budget cut the spine and every drafted spine node was accepted, the step's bonus token says
        whether the first spine node left out would have been: counted like a tested node, so a spine priced out
        on a steep cost curve still teaches the rates that may later price it in."""
        chain = self._spine
        whole_spine = len(path) == drafted and all(sources[i] in SPINE_TAGS for i in path)
        if whole_spine and drafted < len(chain.tokens) and drafted < len(emitted):
            self.acceptance.update(chain.keys[drafted], chain.tokens[drafted] == emitted[drafted])

    def score_root_alternatives(self, emitted: list[int]) -> None:
        """Every root alternative of the step, verified or not, scored against the step's first emitted token,
        which alone decides it, into ``root_rates``: on a steep cost curve the alternatives are never drafted, so
        without this the harvest gate would read their prior forever."""
        if emitted:
            for tok, key in self._root_alts:
                self.root_rates.update(key, tok == emitted[0])

    def learn_undrafted_side(self, tree: DraftTree, emitted: list[int]) -> None:
        """The chain that lost the spine and was not verified (priced out, or never hung) is scored against the
        tokens the step emitted, as far as they decide it: so a source is measured while the other is drafted."""
        side = self._side
        if side is None or not side.tokens or tree.child(0, side.tokens[0]) is not None:
            return
        for tok, key, want in zip(side.tokens, side.keys, emitted):
            self.acceptance.update(key, tok == want)
            if tok != want:
                return

    def after_observe(self, draft, result: StepResult) -> None:
        self.remember(result.emitted)
        if self.aligned is not None:
            self.aligned.extend(result.emitted)
        if draft is self._last:
            self.learn_undrafted_side(draft.tree, result.emitted)
            self.score_root_alternatives(result.emitted)
        sources = draft.tree.sources
        spine = sum(1 for x in sources if x in SPINE_TAGS)
        path = result.accepted[1:]
        if spine:
            got = sum(1 for i in path if sources[i] in SPINE_TAGS)
            self.ema = (1 - EMA_ALPHA) * self.ema + EMA_ALPHA * (got / spine)
        if draft is self._last:
            self.learn_undrafted_spine(spine, path, sources, result.emitted)
        cont = sum(1 for i in path if sources[i] == SPINE_BRANCH)
        draft.info["spine_continuation"] = cont
        self.counts["spine_continuation"] += cont
        self.counts["bypass"] += draft.info.get("bypass", 0)
        self.counts["budget_sum"] += len(draft.tree) - 1


def aligned_info(aligned: AlignedText) -> dict:
    """The step's alignment for its record: where the answer stands in the text it copies (-1: off it), where it
    last left it, and how often it left and came back."""
    return {"aligned_at": -1 if aligned.pointer is None else aligned.pointer,
            "aligned_left": -1 if aligned.anchor is None else aligned.anchor,
            "departures": aligned.departures, "returns": aligned.returns}
