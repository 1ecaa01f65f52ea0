"""`goose chat`: a conversation whose tokens stream in shaded by how they were drafted, beside the live tree.

Decoding runs in a worker thread that only appends step records to a queue; a timer on the UI side drains the
queue a few times a second and redraws, so drawing never sits on the decode path.
"""

from __future__ import annotations

import threading
from collections import deque

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widget import Widget
from textual.widgets import Footer, Input, Static

from drafting.chat.session import ChatSession
from drafting.models.detokenize import Detokenizer
from drafting.machine.openmp import release_idle_workers
from drafting.errors import SpecError
from drafting.speculators import registry

from tui.marks import PROVENANCE_LABEL, PROVENANCE_STYLE, provenance
from tui.stats import LiveStats
from tui.treepane import TreePane

REDRAWS_PER_S = 2  # each redraw costs the decode thread CPU and the GIL (scripts/tui_overhead.py measures it)


def provenance_legend() -> str:
    parts = []
    for key in ("aligned", "spine", "branch", "continuation", "guess", "bonus"):
        style = PROVENANCE_STYLE[key] or "default"
        parts.append(f"[{style}]{PROVENANCE_LABEL[key]}[/]")
    return " · ".join(parts)


class StatsBar(Widget):
    """Two fixed lines: redrawn without a layout pass."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.text = Text()

    def show(self, text: Text) -> None:
        self.text = text
        self.refresh()

    def render(self) -> Text:
        return self.text


class Turn(Static):
    """One message of the transcript."""

    def __init__(self, role: str, text: Text | str = ""):
        super().__init__(classes=role)
        self.role = role
        self.body = Text(text) if isinstance(text, str) else text
        self.update(self._shown())

    def append(self, piece: str, style: str) -> None:
        self.body.append(piece, style=style)

    def note(self, words: str) -> None:
        self.body.append(f"  [{words}]", style="grey50 italic")

    def _shown(self) -> Text:
        who = Text("you › " if self.role == "user" else "goose › ", style="bold")
        return who + (self.body if self.body.plain else Text("…", style="grey50"))

    def redraw(self) -> None:
        self.update(self._shown())


class ChatApp(App):
    CSS_PATH = "chat.tcss"
    TITLE = "goose chat"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("ctrl+q", "quit", "quit", priority=True),
        Binding("ctrl+l", "new_conversation", "new chat", priority=True),
        Binding("f2", "switch_speculator", "speculator", priority=True),
        Binding("f3", "toggle_tree", "tree panel", priority=True),
        Binding("escape", "stop", "stop answer", priority=True),
    ]

    def __init__(self, session: ChatSession, measure_baseline: bool = True):
        super().__init__()
        self.session = session
        self.measure = measure_baseline and session.ar_step_s is None
        self.stats = LiveStats()
        self._pending: deque = deque()  # (record, elapsed) from the decode thread; drained by the UI
        self._stop = threading.Event()
        self.generating = False
        self._clear_after = False
        self._answer: Turn | None = None
        self._detok: Detokenizer | None = None
        self._thread: threading.Thread | None = None
        self._token_text: dict[int, str] = {}

    def compose(self) -> ComposeResult:
        yield Static(id="head")
        with Horizontal(id="main"):
            yield VerticalScroll(id="transcript")
            yield TreePane(self._pane_kind(), self._text, id="tree")
        yield StatsBar(id="stats")
        yield Input(placeholder="Ask something, Enter to send", id="prompt")
        yield Footer()

    def on_mount(self) -> None:
        transcript = self.query_one("#transcript")
        transcript.border_title = "conversation"
        transcript.border_subtitle = provenance_legend()
        self.query_one("#tree", TreePane).show(None, "The tree of the current step appears here while an answer runs.")
        self._update_head()
        self._update_stats()
        self.set_interval(1 / REDRAWS_PER_S, self._drain)
        if self.measure:
            self.query_one("#prompt", Input).disabled = True
            release_idle_workers()  # torch runs on the decode thread only from here: keep its workers spinning
            self._measure_baseline()
        else:
            self.query_one("#prompt", Input).focus()

    def _text(self, token: int) -> str:
        text = self._token_text.get(token)
        if text is None:
            text = self._token_text[token] = self.session.lm.tokenizer.decode([token])
        return text

    def _pane_kind(self) -> str:
        return "ptd" if self.session.decoder.speculator.draws_rows else "spine"

    def _update_head(self) -> None:
        s = self.session
        busy = " · answering (Esc stops)" if self.generating else ""
        self.query_one("#head", Static).update(
            Text.assemble(("goose chat", "bold"), f" · {s.lm.name} · {s.lm.engine_mode} · speculator ",
                          (s.speculator, "bold cyan"),
                          f" (F2) · turn {s.turns}{busy}")
        )
        tree = self.query_one("#tree", TreePane)
        tree.border_title = f"step tree · {s.speculator}"

    def _update_stats(self) -> None:
        bar = self.query_one("#stats", StatsBar)
        bar.show(self.stats.render(self.session.ar_step_s, spark_cells=max(10, bar.size.width - 24),
                                   baseline=self.session.baseline))

    # -- baseline ----------------------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="decode")
    def _measure_baseline(self) -> None:
        self.call_from_thread(self.notify, "Measuring plain decoding (ar) speed for the speedup figure…", timeout=3)
        self.session.measure_baseline()
        self.call_from_thread(self._baseline_done)

    def _baseline_done(self) -> None:
        prompt = self.query_one("#prompt", Input)
        prompt.disabled = False
        prompt.focus()
        self._update_stats()

    # -- an answer ---------------------------------------------------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text or self.generating:
            return
        event.input.value = ""
        transcript = self.query_one("#transcript", VerticalScroll)
        transcript.mount(Turn("user", text))
        self._answer = Turn("assistant")
        transcript.mount(self._answer)
        transcript.scroll_end(animate=False)
        self.stats = LiveStats()
        self._detok = Detokenizer(self.session.lm.tokenizer, self.session.lm.eos_ids)
        self._stop.clear()
        self.generating = True
        event.input.cursor_blink = False  # its blink timer would redraw while decoding
        self._update_head()
        release_idle_workers()  # see drafting/machine/openmp.py: otherwise decoding off this thread runs slower
        self._generate(text)

    @work(thread=True, exclusive=True, group="decode")
    def _generate(self, text: str) -> None:
        self._thread = threading.current_thread()
        error = None
        try:
            for item in self.session.ask(text, self._stop.is_set):
                self._pending.append(item)
        except Exception as exc:  # shown in the transcript: one sentence, the conversation goes on
            error = str(exc) or type(exc).__name__
        result = self.session.last_result
        self.call_from_thread(self._finished, result.stop_reason if result and not error else "", error)

    def _drain(self) -> None:
        if not self._pending or self._answer is None:
            return
        last = None
        while self._pending:
            record, elapsed = self._pending.popleft()
            self.stats.add(record, elapsed, self.session.baseline)
            for token, how in zip(record.emitted, provenance(record)):
                piece = self._detok.push(token)
                if piece:
                    self._answer.append(piece, PROVENANCE_STYLE[how])
            last = record
        self._answer.redraw()
        self.query_one("#transcript", VerticalScroll).scroll_end(animate=False)
        tree = self.query_one("#tree", TreePane)
        if tree.display:
            tree.border_subtitle = f"step {last.step} · +{len(last.emitted)}"
            tree.show(last)
        self._update_stats()

    def _finished(self, stop_reason: str, error: str | None) -> None:
        self._drain()
        self.generating = False
        self.query_one("#prompt", Input).cursor_blink = True
        if self._answer is not None:
            if error:
                self._answer.note(error)
            elif stop_reason == "stopped":
                self._answer.note("stopped")
            elif stop_reason in ("max_new_tokens", "context"):
                self._answer.note(f"cut at {'--max-new-tokens' if stop_reason == 'max_new_tokens' else 'the context window'}")
            self._answer.redraw()
        self._update_head()
        if self._clear_after:
            self._clear_after = False
            self._clear()

    # -- keys --------------------------------------------------------------------------------------------------

    def action_stop(self) -> None:
        if self.generating:
            self._stop.set()

    async def action_quit(self) -> None:
        self._stop.set()
        self.exit()

    def action_new_conversation(self) -> None:
        if self.generating:
            self._clear_after = True
            self._stop.set()
        else:
            self._clear()

    def _clear(self) -> None:
        self.session.new_conversation()
        self.query_one("#transcript", VerticalScroll).remove_children()
        self._answer = None
        self.stats = LiveStats()
        self.query_one("#tree", TreePane).show(None, "New conversation.")
        self._update_stats()
        self._update_head()

    def action_switch_speculator(self) -> None:
        if self.generating:
            self.notify("An answer is running: Esc stops it, then F2 switches.", timeout=3)
            return
        names = list(registry())
        current = self.session.decoder.speculator.name
        nxt = names[(names.index(current) + 1) % len(names)] if current in names else names[0]
        try:
            self.session.use(nxt)
        except SpecError as exc:
            self.notify(str(exc), severity="error")
            return
        tree = self.query_one("#tree", TreePane)
        tree.kind = self._pane_kind()
        tree.show(None, f"Next answers use {nxt}.")
        self._update_head()
        self.notify(f"speculator: {nxt}", timeout=2)

    def action_toggle_tree(self) -> None:
        tree = self.query_one("#tree", TreePane)
        tree.display = not tree.display

    def on_unmount(self) -> None:
        self._stop.set()

    def wait_idle(self, timeout: float = 30.0) -> None:
        """After the app exits: let a running decode step finish so the trace file is complete."""
        if self._thread is not None:
            self._thread.join(timeout)
