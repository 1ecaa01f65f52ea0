"""Step records turned into drawable trees: the verified tree (spine as the trunk) and PTD's in-model draft tree."""

from __future__ import annotations

from drafting.engine.trace import StepRecord

from tui.marks import (
    ACCEPTED,
    CONTINUATION,
    MARKER,
    REJECTED,
    ROW_MARKER,
    ROW_STYLE,
    STYLE,
    GROWN,
    TRUNK_SOURCES,
    node_states,
    node_styles,
    row_states,
)
from tui.treelayout import PlainTree, default_trunk

_PRIORITY = {CONTINUATION: 4, ACCEPTED: 4, REJECTED: 2}


def verified_tree(record: StepRecord) -> tuple[PlainTree, list[int]]:
    """The step's verification tree and its trunk: the spine when the speculator laid one, else the accepted
    path continued by the largest subtree."""
    states = node_states(record)
    tree = PlainTree(
        tokens=list(record.tokens),
        parents=list(record.parents),
        markers=[MARKER[s] for s in states],
        styles=node_styles(record, states),
        priority=[_PRIORITY.get(s, 0) for s in states],
    )
    kids = tree.children()
    trunk = [0]
    while True:
        spine = [c for c in kids[trunk[-1]] if record.sources[c] in TRUNK_SOURCES]
        if not spine:
            break
        trunk.append(spine[0])
    if len(trunk) == 1:
        trunk = default_trunk(tree)
    return tree, trunk


def draft_rows_tree(record: StepRecord) -> tuple[PlainTree, list[int]] | None:
    """The in-model draft rows of a step as a tree under the step's root, and its trunk; None without rows.

    PTD rows: ``parents`` (row index, -1 for a slot). Slots form a Jacobi-like chain, so they are drawn as the
    trunk with each slot's subtree hanging off it; ``grown`` ([parent row, token], -1 = a new slot) are the
    nodes this step added, drawn where they will sit; ``pruned`` (row indices) are the rows this step removed.
    Lookahead rows (``column`` and ``level``) become one chain per column.
    """
    rows = record.rows
    if not rows or not rows.get("tokens"):
        return None
    tokens = [int(t) for t in rows["tokens"]]
    n = len(tokens)
    parents_in = _row_parents(rows, n)
    states = row_states(rows)
    node_parents, trunk, last_slot = [-1], [0], 0
    for r, p in enumerate(parents_in):  # row r becomes node r + 1; children follow their parents
        if p is None or p < 0 or p >= r:
            node_parents.append(last_slot)
            last_slot = r + 1
            trunk.append(r + 1)
        else:
            node_parents.append(p + 1)
    markers = [MARKER["root"]] + [ROW_MARKER[st] for st in states]
    styles = [STYLE["root"]] + [ROW_STYLE[st] for st in states]
    all_tokens = [record.tokens[0]] + tokens
    for item in rows.get("grown") or []:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            continue  # older flag form: already read by row_states
        parent, token = int(item[0]), int(item[1])
        all_tokens.append(token)
        if 0 <= parent < n:
            node_parents.append(parent + 1)
        else:
            node_parents.append(trunk[-1])
            trunk.append(len(all_tokens) - 1)
        markers.append(ROW_MARKER[GROWN])
        styles.append(ROW_STYLE[GROWN])
    tree = PlainTree(
        tokens=all_tokens,
        parents=node_parents,
        markers=markers,
        styles=styles,
        priority=[1 if m == ROW_MARKER[GROWN] else 0 for m in markers],
    )
    return tree, trunk


def _row_parents(rows: dict, n: int) -> list[int | None]:
    if rows.get("parents") is not None:
        return [None if p is None else int(p) for p in rows["parents"]][:n] + [None] * max(0, n - len(rows["parents"]))
    if "column" in rows and "level" in rows:  # Lookahead: each column a chain over its levels
        where = {(c, lvl): r for r, (c, lvl) in enumerate(zip(rows["column"], rows["level"]))}
        return [where.get((c, lvl - 1)) for c, lvl in zip(rows["column"], rows["level"])]
    return [None] * n


def covering(records: list[StepRecord], position: int) -> int:
    """Index of the record whose emitted tokens cover output ``position`` (the last one before it otherwise)."""
    lo, hi = 0, len(records) - 1
    best = 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if records[mid].position <= position:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best
