"""Step records turned into drawable trees: the verified tree (spine as the trunk) and PTD's in-model draft tree."""

from __future__ import annotations

from drafting.trace import StepRecord

from .marks import (
    ACCEPTED,
    CONTINUATION,
    MARKER,
    REJECTED,
    ROW_MARKER,
    ROW_STYLE,
    STYLE,
    GROWN,
    node_states,
    row_states,
)
from .treelayout import PlainTree, default_trunk

_PRIORITY = {CONTINUATION: 4, ACCEPTED: 4, REJECTED: 2}


def verified_tree(record: StepRecord) -> tuple[PlainTree, list[int]]:
    """The step's verification tree and its trunk: the spine when the speculator laid one, else the accepted
    path continued by the largest subtree."""
    states = node_states(record)
    tree = PlainTree(
        tokens=list(record.tokens),
        parents=list(record.parents),
        markers=[MARKER[s] for s in states],
        styles=[STYLE[s] for s in states],
        priority=[_PRIORITY.get(s, 0) for s in states],
    )
    kids = tree.children()
    trunk = [0]
    while True:
        spine = [c for c in kids[trunk[-1]] if record.sources[c] == "spine"]
        if not spine:
            break
        trunk.append(spine[0])
    if len(trunk) == 1:
        trunk = default_trunk(tree)
    return tree, trunk


def draft_rows_tree(record: StepRecord) -> PlainTree | None:
    """PTD's in-model draft tree as a tree under the step's root; None when the step has no rows."""
    rows = record.rows
    if not rows or not rows.get("tokens"):
        return None
    tokens = [int(t) for t in rows["tokens"]]
    parents_in = rows.get("parents") or [-1] * len(tokens)
    states = row_states(rows)
    # Node 0 is the step's root; row r becomes node r + 1. Children must follow parents for the layout, so
    # rows that name a later parent are hung from the root instead of being lost.
    parents = [-1]
    for r, p in enumerate(parents_in):
        p = -1 if p is None else int(p)
        parents.append(p + 1 if 0 <= p < r else 0)
    return PlainTree(
        tokens=[record.tokens[0]] + tokens,
        parents=parents,
        markers=[MARKER["root"]] + [ROW_MARKER[s] for s in states],
        styles=[STYLE["root"]] + [ROW_STYLE[s] for s in states],
        priority=[0] + [1 if s == GROWN else 0 for s in states],
    )


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
