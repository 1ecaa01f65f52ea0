"""`goose viz`: step through recorded traces, the GOOSE spine tree beside the PTD draft tree, at the same output
position."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Footer, Static

from drafting.engine.trace import StepRecord, Trace

from tui.dialogs import DetailsScreen, NumberScreen, details_text
from tui.marks import LEGEND, MARKER, ROW_MARKER, ROW_STYLE, STYLE
from tui.treepane import TreePane
from tui.views import covering



def row_speculators() -> set[str]:
    """Names of the registered speculators that draft in-model rows (their traces open in the PTD pane). Read
    late: the registry imports every speculator, and torch, which opening a trace does not otherwise need."""
    from drafting.speculators import registry

    return {name for name, cls in registry().items() if cls.draws_rows}


def tree_speculators() -> list[str]:
    """Names of the registered speculators whose traces open in the spine-tree pane, goose first."""
    from drafting.speculators import registry

    names = [name for name, cls in registry().items() if not cls.draws_rows]
    return sorted(names, key=lambda n: n != "goose")


@dataclass
class Opened:
    """One trace file shown in a pane."""

    label: str  # file name, shown in the pane title
    trace: Trace

    @property
    def speculator(self) -> str:
        return str(self.trace.header.get("speculator") or self.trace.sections[0]["header"].get("speculator") or "?")

    @property
    def has_rows(self) -> bool:
        return any(r.rows for r in self.trace.records) or self.speculator.split(":")[0] in row_speculators()


def legend() -> Text:
    out = Text()
    out.append(f"{MARKER['root']} root  ", style=STYLE["root"])
    for state, words in LEGEND:
        out.append(f"{MARKER[state]} {words}  ", style=STYLE[state])
    out.append("│ draft rows: ", style="grey50")
    for state in ("grown", "pruned", "kept"):
        out.append(f"{ROW_MARKER[state]} {state}  ", style=ROW_STYLE[state].replace(" strike", ""))
    out.append("│ +bonus", style="bold")
    return out


class VizApp(App):
    CSS_PATH = "viz.tcss"
    TITLE = "goose viz"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("left", "step(-1)", "step"),
        Binding("right", "step(1)", "step", show=False),
        Binding("home", "jump(0)", "first"),
        Binding("end", "jump(-1)", "last"),
        Binding("space", "play", "play"),
        Binding("g", "goto", "go to"),
        Binding("enter", "details", "node"),
        Binding("tab", "focus_next", "pane", show=False),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, traces: list[Opened], play_interval: float = 0.6):
        super().__init__()
        self.spine = next((t for t in traces if not t.has_rows), None)
        self.ptd = next((t for t in traces if t.has_rows), None)
        self.driver = self.spine or self.ptd
        assert self.driver is not None, "VizApp needs at least one trace"
        # Every step of the driving trace, across sections (chat turns): (section index, record).
        self.steps: list[tuple[int, StepRecord]] = [
            (s, r) for s, sec in enumerate(self.driver.trace.sections) for r in sec["records"]
        ]
        self.index = 0
        self.play_interval = play_interval
        self._timer = None

    def compose(self) -> ComposeResult:
        yield Static(id="head")
        with Horizontal(id="panes"):
            yield TreePane("spine", self._text, id="spine")
            yield TreePane("ptd", self._text, id="ptd")
        yield Static(legend(), id="legend")
        yield Footer()

    def _text(self, token: int) -> str:
        for opened in (self.spine, self.ptd):
            if opened and token in opened.trace.token_text:
                return opened.trace.token_text[token]
        return f"<{token}>"

    def on_mount(self) -> None:
        self.query_one("#spine", TreePane).focus()
        self.show_step()

    # -- what is on screen ---------------------------------------------------------------------------------

    def show_step(self) -> None:
        section, record = self.steps[self.index]
        spine_pane, ptd_pane = self.query_one("#spine", TreePane), self.query_one("#ptd", TreePane)
        first, *others = tree_speculators()
        also = f" (or {'/'.join(others)})" if others else ""
        for pane, opened, title, missing in (
            (spine_pane, self.spine, "spine tree", f"No spine-tree trace open: pass a {first}{also} trace too."),
            (ptd_pane, self.ptd, "PTD draft tree", "No PTD trace open: pass a ptd trace too, or record both with "
             "goose viz --prompt '…' --speculators goose,ptd."),
        ):
            if opened is None:
                pane.border_title = title
                pane.show(None, missing)
                continue
            rec = record if opened is self.driver else self._aligned(opened, section, record.position)
            pane.border_title = f"{title} · {opened.speculator}"
            if rec is None:
                pane.border_subtitle = ""
                pane.show(None, f"{opened.label} has no step at output position {record.position}.")
            else:
                end = rec.position + len(rec.emitted)
                pane.border_subtitle = f"step {rec.step} · tokens {rec.position}–{end - 1}"
                pane.show(rec)
        sections = len(self.driver.trace.sections)
        where = f"turn {section + 1}/{sections} · " if sections > 1 else ""
        playing = "▶ playing" if self._timer else "❚❚ paused"
        mode = self.driver.trace.header.get("mode")  # what ran it: the engine and its weights (older traces: none)
        self.query_one("#head", Static).update(
            Text.assemble(
                ("goose viz ", "bold"),
                f"· {self.driver.label} · " + (f"{mode} · " if mode else "") + f"{where}step {self.index + 1}/{len(self.steps)} · output position "
                f"{record.position} · ",
                (playing, "grey50"),
            )
        )

    def _aligned(self, opened: Opened, section: int, position: int) -> StepRecord | None:
        sections = opened.trace.sections
        if section >= len(sections) or not sections[section]["records"]:
            return None
        records = sections[section]["records"]
        rec = records[covering(records, position)]
        return rec if rec.position <= position else None

    # -- keys ------------------------------------------------------------------------------------------------

    def action_step(self, delta: int) -> None:
        self.index = max(0, min(len(self.steps) - 1, self.index + delta))
        self.show_step()

    def action_jump(self, where: int) -> None:
        self.index = where % len(self.steps)
        self.show_step()

    def action_play(self) -> None:
        if self._timer:
            self._timer.stop()
            self._timer = None
        else:
            self._timer = self.set_interval(self.play_interval, self._advance)
        self.show_step()

    def _advance(self) -> None:
        if self.index + 1 >= len(self.steps):
            self.action_play()  # reached the end: pause
            return
        self.action_step(1)

    def action_goto(self) -> None:
        section = self.steps[self.index][0]

        def go(position: int | None) -> None:
            if position is None:
                return
            in_section = [i for i, (s, _) in enumerate(self.steps) if s == section]
            records = [self.steps[i][1] for i in in_section]
            self.index = in_section[covering(records, max(0, position))]
            self.show_step()

        self.push_screen(NumberScreen("Go to output position:"), go)

    def action_details(self) -> None:
        pane = self.focused if isinstance(self.focused, TreePane) else self.query_one("#spine", TreePane)
        if pane.selected is None:
            pane.action_cursor(0)
        d = pane.node_details()
        if d is None:
            self.notify("No node here: ↑/↓ pick a node, Tab switches pane.", timeout=3)
            return
        self.push_screen(DetailsScreen(details_text(d, self._text)))
