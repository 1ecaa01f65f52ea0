"""In-model draft rows: mask, positions and cache handling against a sequential computation.

Each step row (tree node or draft row) must produce the logits of a fresh causal forward over the prefix plus
the rows it sees, in order, at their positions. After acceptance only prefix + accepted path stay cached.
"""

import torch

from drafting.engine.hf.kv_cache import new_cache
from drafting.engine.tree import Draft, DraftRows, DraftTree
from drafting.engine.hf.step_inputs import step_inputs
from drafting.engine.hf.forward import HFForward, keep_accepted

PREFIX = [5, 17, 42, 8, 99, 23, 61, 12, 77, 3]


def _fresh_logits(lm, tokens, positions):
    ids = torch.tensor([tokens])
    pos = torch.tensor([positions])
    with torch.inference_mode():
        return lm.model(input_ids=ids, position_ids=pos).logits[0, -1]


def _step_rows(draft):
    """(token, position offset, sorted visible rows) of every step row, tree first."""
    tree, rows = draft.tree, draft.rows
    vis = tree.visibility()
    out = [(tree.tokens[i], tree.depths[i], [j for j in range(i) if vis[i, j]]) for i in range(len(tree))]
    for r in range(len(rows or [])):
        out.append((rows.tokens[r], rows.offsets[r], sorted(rows.visible[r])))
    return out


def _check_against_sequential(lm, draft):
    fwd = HFForward(lm.model, lm.dtype, lm.device)
    cache = new_cache(lm.model.config)
    fwd.prefill(PREFIX, cache)
    p = len(PREFIX)
    logits = fwd.step(draft, cache)
    assert logits.shape[0] == draft.size
    step_rows = _step_rows(draft)
    for i, (tok, off, seen) in enumerate(step_rows):
        # the visible set must be a chain for a sequential forward to be defined: each seen row sees exactly
        # the seen rows listed before it
        for k, j in enumerate(seen):
            assert step_rows[j][2] == seen[:k], f"row {i}: visible set is not a chain"
        tokens = PREFIX + [step_rows[j][0] for j in seen] + [tok]
        positions = list(range(p)) + [p + step_rows[j][1] for j in seen] + [p + off]
        want = _fresh_logits(lm, tokens, positions)
        torch.testing.assert_close(logits[i], want, atol=1e-4, rtol=1e-4, msg=lambda m: f"row {i}: {m}")
    return cache, logits


def _jacobi_window(tree_size, root_row, width, levels, tokens):
    """Lookahead's window: level j of column a sits at offset 1+a+j and sees root, level 0 up to column a,
    then its own column's earlier levels."""
    rows = DraftRows()
    index = {}
    it = iter(tokens)
    for j in range(levels):
        for a in range(width):
            seen = [root_row] + [index[(0, c)] for c in range(a)] + [index[(k, a)] for k in range(j)]
            index[(j, a)] = tree_size + len(rows)
            rows.tokens.append(next(it))
            rows.offsets.append(1 + a + j)
            rows.visible.append(seen)
    return rows


def _tree():
    tree = DraftTree(31)
    a = tree.add(40, 0, "t")
    tree.add(41, a, "t")
    b = tree.add(50, 0, "t")
    tree.add(51, b, "t")
    return tree


def test_tree_plus_jacobi_window_rows_match_sequential(tiny_lm):
    tree = _tree()
    rows = _jacobi_window(len(tree), 0, width=4, levels=3, tokens=range(60, 72))
    _check_against_sequential(tiny_lm, Draft(tree=tree, rows=rows))


def test_rows_forming_a_tree_that_skips_positions(tiny_lm):
    """PTD-like rows: a first-level chain with subtrees; offsets need not be contiguous with the tree's."""
    tree = _tree()
    t = len(tree)
    rows = DraftRows(
        tokens=[70, 71, 72, 73, 74, 75],
        # first level at offsets 1, 2; children below them; the last row sits far ahead
        offsets=[1, 2, 2, 3, 3, 9],
        visible=[[0], [0, t], [0, t], [0, t, t + 1], [0, t, t + 2], [0, t, t + 1, t + 3]],
    )
    _check_against_sequential(tiny_lm, Draft(tree=tree, rows=rows))


def test_rows_may_see_tree_nodes(tiny_lm):
    tree = _tree()
    t = len(tree)
    # rows continuing the tree branch 0 -> 1 -> 2 (tokens 40, 41)
    rows = DraftRows(tokens=[80, 81], offsets=[3, 4], visible=[[0, 1, 2], [0, 1, 2, t]])
    _check_against_sequential(tiny_lm, Draft(tree=tree, rows=rows))


def test_rows_kv_dropped_after_acceptance(tiny_lm):
    """After a step with rows, the cache holds prefix + accepted path only: the next step's logits equal a
    fresh forward over the committed text."""
    tree = _tree()
    rows = _jacobi_window(len(tree), 0, width=3, levels=2, tokens=range(90, 96))
    draft = Draft(tree=tree, rows=rows)
    cache, _ = _check_against_sequential(tiny_lm, draft)
    p = len(PREFIX)
    path = [0, 3, 4]  # root -> 50 -> 51, a branch that is not the first in the flat order
    keep_accepted(cache, p, path)
    assert cache.get_seq_length() == p + len(path)
    fwd = HFForward(tiny_lm.model, tiny_lm.dtype, tiny_lm.device)
    nxt = DraftTree(7)
    nxt.add(8, 0, "t")
    logits = fwd.step(Draft(tree=nxt, rows=DraftRows([9], [1], [[0]])), cache)
    committed = PREFIX + [31, 50, 51]
    want = _fresh_logits(tiny_lm, committed + [7], list(range(len(committed) + 1)))
    torch.testing.assert_close(logits[0], want, atol=1e-4, rtol=1e-4)
    want_row = _fresh_logits(tiny_lm, committed + [7, 9], list(range(len(committed) + 2)))
    torch.testing.assert_close(logits[2], want_row, atol=1e-4, rtol=1e-4)


def test_row_positions_and_mask_layout(tiny_lm):
    tree = _tree()
    rows = DraftRows(tokens=[70, 71], offsets=[1, 5], visible=[[0], [0, 5]])
    ids, pos, mask = step_inputs(Draft(tree=tree, rows=rows), 10, torch.float32, "cpu")
    assert ids[0].tolist() == [31, 40, 41, 50, 51, 70, 71]
    assert pos[0].tolist() == [10, 11, 12, 11, 12, 11, 15]
    seen = (mask[0, 0] == 0).int()
    assert seen.shape == (7, 17)
    assert seen[:, :10].all()  # everyone sees the prefix
    assert seen[6, 10:].tolist() == [1, 0, 0, 0, 0, 1, 1]  # root, row 5 and itself
    assert seen[5, 10:].tolist() == [1, 0, 0, 0, 0, 1, 0]
