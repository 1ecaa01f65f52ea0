"""Tree builders of `goose`, `iso` and `tr` (shape properties on a hand-filled table), the budget split, and
``budget=auto`` choosing small trees on steep cost curves and large ones on flat curves."""

import pytest
import torch

from drafting.budget.acceptance_rates import AcceptanceStats
from drafting.budget.selection import best_first, best_prefix, chain_pays, most_paying_nodes, paying_nodes
from drafting.machine.verify_cost import is_sane, monotone
from drafting.machine.cost_curve import CostCurve, PrefixCost
from drafting.sources.adjacency import AdjacencyTable
from drafting.speculators import create
from drafting.speculators.goose import build_spine_tree, plan_budget
from drafting.speculators.iso import build_kary_tree
from drafting.speculators.tr import LEVELS, TEMPLATE, build_template_tree
from drafting.speculators.tree_base import Candidates
from drafting.engine.tree import ROOT_ALT, SPINE, SPINE_BRANCH, DraftTree

V = 64
STEEP = CostCurve(sizes=[1, 2, 4, 8, 16, 32, 64, 128], seconds=[0.038, 0.061, 0.062, 0.064, 0.077, 0.105, 0.160, 0.273])
FLAT = CostCurve(sizes=[1, 2, 4, 8, 16, 32, 64, 128], seconds=[0.020, 0.0201, 0.0202, 0.0203, 0.0205, 0.021, 0.022, 0.030])


@pytest.fixture(scope="module")
def table():
    """Every token t is followed by t+1 .. t+10 (mod V) with falling probabilities."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(V, V, generator=gen) - 20
    for t in range(V):
        for r in range(10):
            logits[t, (t + 1 + r) % V] = 5.0 - 0.6 * r
    tab = AdjacencyTable(k=10)
    tab.harvest(list(range(V)), [-1] * V, logits)
    return tab


def check_shape(tree: DraftTree):
    for i in range(1, len(tree)):
        assert tree.parents[i] < i  # parents before children
    seen = set()
    for i in range(1, len(tree)):
        key = (tree.parents[i], tree.tokens[i])
        assert key not in seen  # no duplicate siblings
        seen.add(key)


def branch_levels(tree: DraftTree) -> dict[int, int]:
    """Level of each branch node below the spine node or root it hangs from."""
    level = {}
    for i in range(1, len(tree)):
        p = tree.parents[i]
        level[i] = level.get(p, 0) + 1 if tree.sources[i] != SPINE else 0
    return level


@pytest.mark.parametrize("conf, ema, chain_len", [(0.0, 0.5, 0), (0.45, 0.1, 6), (0.8, 0.3, 20), (0.9, 0.6, 40)])
def test_spine_tree_properties(table, conf, ema, chain_len):
    chain = [(40 + 7 * i) % V for i in range(chain_len)]
    plan = plan_budget(chain_len, conf, ema)
    cand = build_spine_tree(3, 2, chain, conf, plan, table)
    tree = cand.tree
    check_shape(tree)
    assert len(tree) - 1 <= plan.budget == 60 + int(40 * conf)
    assert len(cand.keys) == len(cand.priors) == len(tree)
    # the spine is laid first, as one path, and holds the chain's prefix
    spine = [i for i in range(1, len(tree)) if tree.sources[i] == SPINE]
    assert spine == list(range(1, plan.spine + 1))
    assert [tree.tokens[i] for i in spine] == chain[: plan.spine]
    # widths fall with depth: a node at branch level L has at most max(1, k // (L + 1)) children
    kids = tree.children()
    levels = branch_levels(tree)
    for i in range(len(tree)):
        lvl = 0 if i == 0 or tree.sources[i] == SPINE else levels[i]
        branch_kids = [c for c in kids[i] if tree.sources[c] != SPINE]
        assert len(branch_kids) <= max(1, 10 // (lvl + 1))
        assert lvl <= 6
    if chain_len:
        assert any(tree.sources[i] == SPINE_BRANCH for i in range(len(tree)))
    assert any(tree.sources[i] == ROOT_ALT for i in range(len(tree)))


def test_budget_split_follows_the_paper():
    p = plan_budget(20, 0.0, 0.5)  # ratio 0.5: but no confidence means no chain... the rule still holds
    assert (p.budget, p.spine, p.branch, p.root, p.bypass) == (60, 20, 20, 20, False)
    p = plan_budget(30, 0.75, 0.1)  # budget 90, ratio 0.15 + 0.75 * 0.85 = 0.7875 -> 70 -> chain 30
    assert (p.budget, p.spine, p.branch, p.root) == (90, 30, 30, 30)
    p = plan_budget(40, 0.5, 0.3)  # budget 80, ratio 0.3 + 0.5 * 0.7 = 0.65 -> 52 -> chain 40
    assert (p.budget, p.spine, p.branch, p.root) == (80, 40, 20, 20)
    p = plan_budget(100, 1.0, 0.5)  # full confidence: bypass, the whole budget on the spine
    assert (p.budget, p.spine, p.branch, p.root, p.bypass) == (100, 100, 0, 0, True)
    p = plan_budget(100, 1.0, 0.5, use_confidence=False)  # ablation: fixed budget and ratio, no bypass
    assert (p.budget, p.spine, p.bypass) == (60, 30, False)
    p = plan_budget(20, 0.6, 0.5, rho=0.0)  # no spine branches
    assert p.branch == 0 and p.root == p.budget - p.spine
    assert plan_budget(0, 0.0, 0.5).root == 60


def test_spine_branches_favour_early_spine_positions(table):
    chain = [(40 + 7 * i) % V for i in range(12)]
    plan = plan_budget(12, 0.8, 0.5)
    tree = build_spine_tree(3, 2, chain, 0.8, plan, table).tree
    under = [0] * 13  # spine-branch nodes per spine position
    for i in range(1, len(tree)):
        if tree.sources[i] == SPINE_BRANCH:
            a = i
            while tree.sources[a] != SPINE:
                a = tree.parents[a]
            under[tree.depths[a]] += 1
    assert under[1] >= under[2] >= under[4] >= under[12] and under[1] > under[12]


def test_kary_tree_is_balanced(table):
    chain = [50, 51, 52, 53, 54, 55]
    for k in (3, 5):
        cand = build_kary_tree(3, 2, chain, 0.45, 78, table, k=k)
        tree = cand.tree
        check_shape(tree)
        assert len(tree) - 1 == 78 and not cand.best_first
        assert all(len(c) <= k for c in tree.children())
        assert tree.depths == sorted(tree.depths)  # filled level by level
        full = [d for d in range(1, max(tree.depths)) if tree.depths.count(d) != k**d]
        assert not full  # every level above the last is complete
        assert [tree.tokens[i] for i in tree.path_to(max(range(len(tree)), key=lambda i: (tree.sources[i] == "context", tree.depths[i])))][1:] == chain[: max(d for d, s in zip(tree.depths, tree.sources) if s == "context")]


def test_tr_template_and_fill(table):
    assert len(TEMPLATE) == 80
    depth = []
    for p, _ in TEMPLATE:
        depth.append(1 if p < 0 else depth[p] + 1)
    assert tuple(depth.count(d) for d in range(1, 7)) == LEVELS
    # higher-ranked candidates get more children
    kids = [sum(1 for p, _ in TEMPLATE if p == s) for s in range(8)]
    assert kids == sorted(kids, reverse=True) and kids[0] > kids[7]
    tree = build_template_tree(3, 2, table, 80).tree
    check_shape(tree)
    assert len(tree) == 81 and max(tree.depths) == 6
    assert len(build_template_tree(3, 2, table, 30).tree) == 31


def test_best_prefix_and_order():
    probs = [0.9, 0.8, 0.5, 0.1, 0.05]
    assert best_prefix([], STEEP) == 0
    assert best_prefix([0.3], STEEP) == 0  # 0.3 extra tokens do not pay for the 1 -> 2 row jump
    assert best_prefix(probs, FLAT) == 5
    parents = [-1, 0, 1, 0, 3, 2]
    order = best_first(parents, [1.0, 0.2, 0.9, 0.6, 0.5, 0.85])
    assert order == [3, 4, 1, 2, 5]  # node 2 (0.9) waits for its parent 1
    stats = AcceptanceStats(strength=4)
    assert stats.estimate("a", 0.5) == 0.5
    for _ in range(16):
        stats.update("a", True)
    assert stats.estimate("a", 0.5) == pytest.approx((16 + 2) / 20)


def test_paying_nodes_keep_a_closed_prefix_and_learning_counts_only_tested_nodes():
    parents = [-1, 0, 1, 0, 3]
    accept = [1.0, 0.9, 0.9, 0.05, 0.9]  # 1 -> 2 likely; 3 unlikely, so its likely child 4 is unlikely too
    assert paying_nodes(parents, accept, FLAT) == [1, 2, 3, 4]
    # each row costs half a one-row step more: 1 and 2 (path 0.9, 0.81) pay, 3 and its child 4 do not
    linear = CostCurve(sizes=[1, 2, 4, 8], seconds=[1.0, 1.5, 2.5, 4.5])
    assert paying_nodes(parents, accept, linear) == [1, 2]
    assert paying_nodes(parents, accept, STEEP, riders=100) == []  # rows that earn nothing can sink a step
    assert paying_nodes(parents, accept, FLAT, ranked=False) == [1, 2, 3, 4]
    tree = DraftTree(7)
    for tok, parent in zip([10, 11, 12, 13], parents[1:]):
        tree.add(tok, parent, ROOT_ALT)
    sub = tree.subtree([1, 2, 4])  # 4's parent 3 is left out: 4 goes too
    assert sub.tokens == [7, 10, 11] and sub.parents == [-1, 0, 1]
    stats = AcceptanceStats()
    stats.learn([None, "a", "b", "c", "d"], parents, accepted=[0, 1])
    # 1 accepted, 3 rejected (both children of the accepted root), 2 rejected (child of accepted 1), 4 untested
    assert stats.table() == {"a": (1.0, 1), "b": (0.0, 1), "c": (0.0, 1)}


def test_noisy_cost_curves_are_repaired():
    spiky = CostCurve(sizes=[1, 2, 4, 8], seconds=[0.3, 3.7, 0.06, 2.4])
    assert not is_sane(spiky) and is_sane(STEEP)
    fixed = monotone(spiky)
    assert fixed.seconds == sorted(fixed.seconds) and fixed.seconds[-1] <= 0.12


def _auto_draft(spec: str, curve: CostCurve, table: AdjacencyTable, context: list[int]):
    s = create(spec)
    s.table = table
    s.curve = curve if isinstance(curve, PrefixCost) else PrefixCost(curve)
    s.reset(context)
    return s.propose(context)


@pytest.mark.parametrize("name", ["goose", "iso", "tr"])
def test_auto_budget_small_on_steep_and_large_on_flat_curves(table, name):
    context = [5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3]  # a repetitive text: a context chain exists
    steep = _auto_draft(name, STEEP, table, context)
    flat = _auto_draft(name, FLAT, table, context)
    check_shape(steep.tree)
    check_shape(flat.tree)
    assert steep.info["budget"] == len(steep.tree) - 1
    assert len(steep.tree) - 1 <= 16
    assert len(flat.tree) - 1 >= 30
    assert len(flat.tree) > 2 * len(steep.tree)


def test_prefix_cost_interpolates_in_cache_length():
    cost = PrefixCost(FLAT, STEEP, 256, 1256)
    assert cost.at(256).seconds == FLAT.seconds
    # below the short prefix the line goes on down, to half the short curve at most
    f = (100 - 256) / 1000
    assert cost.at(100).seconds == pytest.approx([max(a + f * (b - a), a / 2) for a, b in zip(FLAT.seconds, STEEP.seconds)])
    assert cost.at(0).seconds[0] < cost.at(100).seconds[0] < FLAT.seconds[0]
    assert cost.one_row(100) == pytest.approx(cost.at(100).seconds[0])
    mid = cost.at(756).seconds
    assert mid == pytest.approx([(a + b) / 2 for a, b in zip(FLAT.seconds, STEEP.seconds)])
    assert PrefixCost(FLAT).at(5000) is FLAT  # no long curve: the short one everywhere


def test_auto_budget_shrinks_after_a_long_prompt(table):
    context = [5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3]
    cost = PrefixCost(FLAT, STEEP, 4, 16)  # this context's cache length (16) reads the steep curve
    short_cost = PrefixCost(FLAT, STEEP, 16, 1000)  # ... here it reads the flat one
    assert len(_auto_draft("goose", cost, table, context).tree) < len(_auto_draft("goose", short_cost, table, context).tree)


@pytest.mark.parametrize("overhead_s", [0.0, 0.01])
def test_most_paying_nodes_never_cuts_off_a_draft_that_pays(overhead_s):
    """Against every draft size: where n nodes of path probability ``best`` each would beat a plain step, the
    bound lets at least n through; where no size would, it is 0."""
    gen = torch.Generator().manual_seed(1)
    for curve in [STEEP, FLAT] + [CostCurve(sizes=[1, 2, 3, 4, 8, 16], seconds=sorted(
            (0.01 + torch.rand(6, generator=gen) * 0.1).tolist())) for _ in range(20)]:
        for best in [0.05, 0.2, 0.4, 0.6, 0.8, 0.95, 1.0]:
            plain = 1 / (overhead_s + curve.time(1))
            paying = [n for n in range(1, 41) if (1 + n * best) / (overhead_s + curve.time(n + 1)) > plain]
            room = most_paying_nodes(best, curve, 40, overhead_s)
            assert room >= max(paying, default=0) and (room == 0) == (not paying), (curve.seconds, best, room)


def test_goose_grows_no_tree_and_harvests_nothing_where_nothing_can_pay():
    """A step whose first nodes cannot pay on the curve is a plain step at a plain step's cost: no candidate tree,
    no harvest of its one row, and no prompt logits asked for; on a flat curve the same step drafts and harvests."""
    from drafting.engine.speculator import StepResult

    context = [3, 9, 21, 40, 2]  # no repeat: no spine, only the table's root alternatives
    steep = CostCurve(sizes=[1, 2, 4, 8], seconds=[0.010, 0.020, 0.040, 0.080])  # every row costs a whole step
    for curve, drafts in ((steep, False), (FLAT, True)):
        s = create("goose")
        s.table = AdjacencyTable(k=10)
        s.table.harvest(list(range(V)), [-1] * V, torch.stack([table_logits(t) for t in range(V)]))
        s.curve = PrefixCost(curve)
        s.reset(context)
        assert (s.prefill_logit_rows != 0) == drafts  # the prompt's logits would feed only such steps
        draft = s.propose(context)
        assert (len(draft.tree) > 1) == drafts
        logits = torch.zeros(len(draft.tree), V)
        logits[:, 7] = 9.0  # the target predicts 7 after every node
        s.observe(draft, StepResult(logits=logits, accepted=[0], emitted=[7], prefix_len=len(context) - 1))
        harvested = int(s.table.successors(-1, context[-1])[0][0]) == 7
        assert harvested == drafts


@pytest.mark.parametrize("overhead_s", [0.0, 0.01])
def test_chain_pays_exactly_where_some_chain_length_beats_a_plain_step(overhead_s):
    gen = torch.Generator().manual_seed(2)
    for curve in [STEEP, FLAT] + [CostCurve(sizes=[1, 2, 3, 4, 8, 16], seconds=sorted(
            (0.01 + torch.rand(6, generator=gen) * 0.1).tolist())) for _ in range(20)]:
        for rate in [0.05, 0.3, 0.45, 0.6, 0.8, 0.95]:
            plain = 1 / (overhead_s + curve.time(1))
            pays = any(sum(rate ** d for d in range(n + 1)) / (overhead_s + curve.time(n + 1)) > plain
                       for n in range(1, 7))
            assert chain_pays(rate, curve, 6, overhead_s) == pays, (curve.seconds, rate)


def test_goose_scores_root_alternatives_it_never_drafts_and_stops_harvesting_where_they_cannot_pay():
    """On a curve where a second row costs most of a step, the root alternatives are priced out, so only the
    emitted tokens can measure them: each step scores every one of them, and once the best score bucket's rate
    is measured low, the prompt's logits are no longer asked for. On a flat curve the harvest stays. The tree's
    own rates are not touched: they learn from drafted alternatives only."""
    from drafting.engine.speculator import StepResult

    context = [3, 9, 21, 40, 2]  # no repeat: no spine, only the table's root alternatives
    curve = CostCurve(sizes=[1, 2, 4, 8], seconds=[0.010, 0.016, 0.020, 0.026])
    s = create("goose:bigram=off")  # the stale table below is all it reads (the steps' own rows go to bigrams)
    s.table = AdjacencyTable(k=10)
    stale = torch.stack([table_logits(t) for t in range(V)])
    s.curve = PrefixCost(curve)
    s.reset(context)
    assert s.prefill_logit_rows != 0  # at the prior (0.8 for a sure successor) a chain of them would pay
    for _ in range(40):
        s.table.harvest(list(range(V)), [-1] * V, stale)  # a table the target keeps disagreeing with
        s.reset(context)  # the same step again (the emitted tokens would make the text a repeat, and a spine)
        draft = s.propose(context)
        logits = torch.zeros(len(draft.tree), V)
        logits[:, 0] = 9.0  # the target never follows the table
        s.observe(draft, StepResult(logits=logits, accepted=[0], emitted=[0], prefix_len=len(context) - 1))
    tested = {k: v for k, v in s.root_rates.table().items() if k.startswith("('root-alt'")}
    assert tested and all(rate == 0 and n >= 40 for rate, n in tested.values())
    drafted = sum(n for k, (_, n) in s.acceptance.table().items() if k.startswith("('root-alt'"))
    assert drafted < sum(n for _, n in tested.values())  # the tree's rates saw only what was verified
    assert s.prefill_logit_rows == 0
    s.curve = PrefixCost(FLAT)
    assert s.prefill_logit_rows != 0  # where a row costs almost nothing, even rare hits pay


def table_logits(t: int) -> torch.Tensor:
    """The ``table`` fixture's row for token t: t+1 .. t+10 with falling scores (the first near 0.45)."""
    row = torch.full((V,), -20.0)
    for r in range(10):
        row[(t + 1 + r) % V] = 5.0 - 0.6 * r
    return row


def test_goose_spine_is_chosen_first_under_auto(table):
    context = [5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3]
    d = _auto_draft("goose", STEEP, table, context)
    assert d.tree.sources[1] == SPINE and d.tree.tokens[1] == 4


def test_goose_info_and_options():
    s = create("goose:budget=60,rho=0,bigram=off,confidence=off,harvest=off")
    assert s.spec() == "goose:budget=60,rho=0.0,bigram=off,confidence=off,harvest=off"
    for name in ("goose", "iso", "tr"):
        spec = create(name)
        assert spec.summary_line and all(o.help for o in spec.options.values())
        assert spec.settings.budget == "auto"


def test_candidates_skip_duplicate_tokens():
    cand = Candidates(tree=DraftTree(1))
    assert cand.add(2, 0, SPINE, "k", 0.5) == 1
    assert cand.add(2, 0, ROOT_ALT, "k", 0.5) is None
    assert len(cand.keys) == 2
