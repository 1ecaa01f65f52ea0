"""Lay a token tree out as lines of text: a vertical trunk, and each trunk node's other subtrees hanging to its
right as compact chains. What does not fit the given width and height collapses into "+N" counts.

Pure layout: no widgets here, so it is tested without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rich.cells import cell_len

TOKEN_CELLS = 12  # longest token label drawn in full


@dataclass(frozen=True)
class Seg:
    text: str
    style: str = ""
    node: int | None = None  # the tree node this segment draws, if any
    part: str = ""  # which tree of a pane the node belongs to ("tree" or "rows")


@dataclass
class PlainTree:
    """What the layout needs to know of a tree: node 0 is the root, parents[0] == -1."""

    tokens: list[int]
    parents: list[int]
    markers: list[str]
    styles: list[str]
    priority: list[int]  # higher = drawn first / followed first when a chain picks a child

    def children(self) -> list[list[int]]:
        kids: list[list[int]] = [[] for _ in self.tokens]
        for i in range(1, len(self.tokens)):
            p = self.parents[i]
            if 0 <= p < len(self.tokens):
                kids[p].append(i)
        return kids


def token_label(text: str, cells: int = TOKEN_CELLS) -> str:
    """A token as a short visible label: whitespace made visible, one leading space dropped, long ones cut."""
    if text.strip() == "":
        label = text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") or "∅"
    else:
        label = text.replace("\n", "⏎").replace("\t", "⇥").replace("\r", "")
        if label.startswith(" "):
            label = label[1:]
    if cell_len(label) > cells:
        while cell_len(label) > cells - 1:
            label = label[:-1]
        label += "…"
    return label


def subtree_sizes(tree: PlainTree, kids: list[list[int]]) -> list[int]:
    sizes = [1] * len(tree.tokens)
    for i in range(len(tree.tokens) - 1, 0, -1):  # children always come after their parent
        p = tree.parents[i]
        if 0 <= p < i:
            sizes[p] += sizes[i]
    return sizes


def default_trunk(tree: PlainTree) -> list[int]:
    """Root, then repeatedly the child of highest priority (ties: the largest subtree)."""
    kids = tree.children()
    sizes = subtree_sizes(tree, kids)
    trunk = [0]
    while kids[trunk[-1]]:
        trunk.append(max(kids[trunk[-1]], key=lambda c: (tree.priority[c], sizes[c])))
    return trunk


def layout(
    tree: PlainTree, trunk: list[int], text: Callable[[int], str], width: int, height: int
) -> list[list[Seg]]:
    """Lines of segments: one per trunk node (more when room allows), at most ``height`` lines."""
    if height < 1 or width < 8 or not tree.tokens:
        return []
    kids = tree.children()
    sizes = subtree_sizes(tree, kids)
    on_trunk = set(trunk)
    label_cells = min(TOKEN_CELLS, max(cell_len(token_label(text(tree.tokens[t]))) for t in trunk))

    def chain(start: int) -> tuple[list[int], int]:
        nodes = [start]
        while kids[nodes[-1]]:
            nodes.append(max(kids[nodes[-1]], key=lambda c: (tree.priority[c], sizes[c])))
        return nodes, sizes[start] - len(nodes)

    def chunk(start: int) -> list[Seg]:
        nodes, hidden = chain(start)
        segs = [Seg("├", "grey50")]
        for n in nodes:
            segs.append(Seg(f"{tree.markers[n]}{token_label(text(tree.tokens[n]))}", tree.styles[n], n))
            segs.append(Seg(" "))
        if hidden:
            segs.append(Seg(f"+{hidden} ", "grey50"))
        return segs

    # Per trunk node: its head (marker + label) and the branch chunks hanging off it.
    rows = []
    for t in trunk:
        label = token_label(text(tree.tokens[t]))
        pad = " " * max(0, label_cells - cell_len(label))
        head = [Seg(f"{tree.markers[t]} ", tree.styles[t], t), Seg(label, tree.styles[t], t), Seg(pad + " ")]
        branches = sorted((c for c in kids[t] if c not in on_trunk), key=lambda c: (-tree.priority[c], -sizes[c], c))
        rows.append((head, branches))

    # Too many trunk nodes for the height: keep the first ones and say how many were left out.
    cut_note = None
    if len(rows) > height:
        keep = max(1, height - 1)
        left_out = sum(1 + sum(sizes[b] for b in br) for _, br in rows[keep:])
        cut_note = [Seg(f"⋮ +{len(rows) - keep} trunk nodes below ({left_out} nodes)", "grey50")]
        rows = rows[:keep]

    spare = height - len(rows) - (1 if cut_note else 0)
    head_cells = 2 + label_cells + 1
    lines: list[list[Seg]] = []
    for head, branches in rows:
        line, used = list(head), head_cells
        pending = [chunk(b) for b in branches]
        extra_lines = 0
        i = 0
        while i < len(pending):
            segs = pending[i]
            need = sum(cell_len(s.text) for s in segs)
            if used + need <= width:
                line += segs
                used += need
                i += 1
                continue
            rest = sum(sizes[b] for b in branches[i:])
            if spare > 0 and used > head_cells:  # wrap onto a continuation line under this trunk node
                lines.append(line)
                spare -= 1
                extra_lines += 1
                line, used = [Seg(" " * (head_cells - 1) + "┆", "grey50")], head_cells
                continue
            if used + cell_len(f"+{rest}") <= width or used == head_cells:
                line.append(Seg(f"+{rest}", "grey50"))
            break
        lines.append(line)
    if cut_note:
        lines.append(cut_note)
    return [clip(line, width) for line in lines]


def clip(line: list[Seg], width: int) -> list[Seg]:
    out, used = [], 0
    for s in line:
        w = cell_len(s.text)
        if used + w > width:
            room = width - used
            if room > 0:
                out.append(Seg(s.text[: max(0, room - 1)] + "…", s.style, s.node))
            break
        out.append(s)
        used += w
    return out
