"""The tree widget: one step's verified tree (spine as the trunk), or PTD's draft tree above its guess tree.

It lays itself out for whatever size it is given; ↑/↓ move a node cursor that the app's Enter reads.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from rich.text import Text
from textual.binding import Binding
from textual.reactive import reactive
from textual.widget import Widget

from drafting.engine.trace import StepRecord

from tui.marks import (
    ALIGNED_STYLE, MARKER, PROVENANCE_STYLE, ROW_MARKER, STYLE, alignment_line, node_states, offered_line, provenance,
    row_states,
)
from tui.treelayout import Seg, clip, default_trunk, layout, token_label
from tui.views import draft_rows_tree, verified_tree

INFO_KEYS = ("route", "spine_source", "bypass", "budget", "confidence", "ema", "chain", "spine_continuation", "guess", "draft_rows",
             "forest", "pool", "columns", "ngram", "trimmed")
SHORT = {"spine_source": "spine from", "confidence": "conf", "spine_continuation": "continued", "draft_rows": "rows"}


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


class TreePane(Widget, can_focus=True):
    """Draws one step. ``kind`` is "spine" (verified tree) or "ptd" (draft rows + guess tree)."""

    BINDINGS = [
        Binding("up", "cursor(-1)", "node ↑", show=False),
        Binding("down", "cursor(1)", "node ↓", show=False),
    ]

    record: reactive[StepRecord | None] = reactive(None, always_update=True)
    message: reactive[str] = reactive("")

    def __init__(self, kind: str = "spine", text: Callable[[int], str] = str, **kw):
        super().__init__(**kw)
        self.kind = kind
        self.text = text
        self.selected: tuple[str, int] | None = None  # ("tree" | "rows", node index)
        self._visible: list[tuple[str, int]] = []
        self.compact = False  # chat's side panel: fewer words, same tree

    def show(self, record: StepRecord | None, message: str = "") -> None:
        if record is not self.record:
            self.selected = None
        self.message = message
        self.record = record

    def action_cursor(self, delta: int) -> None:
        if not self._visible:
            return
        if self.selected in self._visible:
            i = (self._visible.index(self.selected) + delta) % len(self._visible)
        else:
            i = 0
        self.selected = self._visible[i]
        self.refresh()

    # -- drawing -------------------------------------------------------------------------------------------

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        record = self.record
        if record is None:
            return Text(self.message or "no step yet", style="grey50")
        out: list[list[Seg]] = []
        out += self._summary(record, width)
        self._visible = []
        if self.kind == "ptd":
            drawn = draft_rows_tree(record)
            room = height - len(out) - 2
            if drawn is None:
                out.append([Seg("no in-model draft rows in this step", "grey50")])
            else:
                rows = record.rows
                grown = sum(1 for g in rows.get("grown") or [] if isinstance(g, (list, tuple)))
                head = f"draft tree · {len(rows['tokens'])} rows"
                head += f" · +{grown} grown" if grown else ""
                head += f" · ✂{len(rows.get('pruned') or [])} pruned" if rows.get("pruned") else ""
                out.append([Seg(head, "bold")])
                out += self._tree_lines("rows", drawn[0], drawn[1], width, max(1, room // 2))
            guess, trunk = verified_tree(record)
            out.append([Seg(f"guess tree · {len(guess.tokens) - 1} nodes verified", "bold")])
            out += self._tree_lines("tree", guess, trunk, width, height - len(out))
        else:
            tree, trunk = verified_tree(record)
            out += self._tree_lines("tree", tree, trunk, width, height - len(out))
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, line in enumerate(out[:height]):
            if i:
                text.append("\n")
            for seg in clip(line, width):
                style = seg.style
                if seg.node is not None and self.selected is not None and self.has_focus:
                    if (seg.part, seg.node) == self.selected:
                        style = f"{style} reverse"
                text.append(seg.text, style=style)
        return text

    def _tree_lines(self, part, tree, trunk, width, height) -> list[list[Seg]]:
        if trunk is None:
            trunk = default_trunk(tree)
        lines = [
            [replace(seg, part=part) if seg.node is not None else seg for seg in line]
            for line in layout(tree, trunk, self.text, width, max(1, height))
        ]
        for line in lines:
            for seg in line:
                key = (part, seg.node)
                if seg.node is not None and key not in self._visible:
                    self._visible.append(key)
        return lines

    def _summary(self, record: StepRecord, width: int) -> list[list[Seg]]:
        """What was drafted and what it cost, the speculator's own facts, and what the step produced."""
        first = f"{len(record.tokens) - 1} drafted · {record.draft_s * 1e3:.1f}/{record.verify_s * 1e3:.0f} ms draft/verify"
        lines = [[Seg(first, "grey70")]]
        facts = []
        for key in INFO_KEYS:
            value = record.info.get(key)
            if value is None or value is False or isinstance(value, (dict, list)):
                continue
            if key == "route":
                facts.append(str(value))
            elif key == "bypass" or value is True:
                if value:
                    facts.append("bypass")
            else:
                facts.append(f"{SHORT.get(key, key)} {_fmt(value)}")
        if facts:
            lines.append([Seg(" · ".join(facts), "grey70")])
        aligned = alignment_line(record.info)
        if aligned:
            lines.append([Seg(aligned, PROVENANCE_STYLE["aligned"])])
        offered = offered_line(record.info)
        if offered:
            lines.append([Seg(offered, "grey70")])
        produced = [Seg(f"+{len(record.emitted)}: ", "bold")]
        for tok, how in zip(record.emitted, provenance(record)):
            mark = "+" if how == "bonus" else MARKER["accepted"]
            style = "bold" if how == "bonus" else ALIGNED_STYLE if how == "aligned" else STYLE["accepted"]
            produced.append(Seg(f"{mark}{token_label(self.text(tok))} ", style))
        if record.stop:
            produced.append(Seg(f"■ {record.stop}", "grey50"))
        lines.append(produced)
        return [clip(line, width) for line in lines]

    def node_details(self) -> dict | None:
        """What Enter shows about the node under the cursor."""
        record = self.record
        if record is None or self.selected is None:
            return None
        part, node = self.selected
        if part == "rows":
            rows = record.rows or {}
            if node == 0:
                part, node = "tree", 0
            else:
                tree, _ = draft_rows_tree(record)
                depth, p = 0, tree.parents[node]
                while p >= 0:
                    depth, p = depth + 1, tree.parents[p]
                token, r = tree.tokens[node], node - 1
                if r < len(rows["tokens"]):
                    state, source = row_states(rows)[r], f"in-model draft row {r}"
                    depth = (rows.get("depths") or rows.get("depth") or [depth] * (r + 1))[r]
                else:
                    state, source = "grown", "grown by this step (drafted next step)"
                return {"token": token, "text": self.text(token), "source": source, "depth": depth,
                        "state": f"{ROW_MARKER[state]} {state}", "top": None}
        token = record.tokens[node]
        depth, p = 0, record.parents[node]
        while p >= 0:
            depth += 1
            p = record.parents[p]
        top = record.top[node] if record.top and node < len(record.top) else None
        state = node_states(record)[node]
        return {"token": token, "text": self.text(token), "source": record.sources[node], "depth": depth,
                "state": f"{MARKER[state]} {state}", "top": top}
