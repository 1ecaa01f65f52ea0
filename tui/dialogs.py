"""Small modal screens shared by the apps: a node's details, and a number prompt."""

from __future__ import annotations

from typing import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


def details_text(d: dict, text: Callable[[int], str]) -> Text:
    out = Text()
    out.append(f"token {d['text']!r}", style="bold")
    out.append(f"  id {d['token']}\n")
    out.append(f"source {d['source']} · depth {d['depth']} · state {d['state']}\n")
    if d.get("top"):
        out.append("target's top-5 here:\n", style="bold")
        for tok, prob in d["top"]:
            bar = "█" * max(1, round(prob * 20))
            out.append(f"  {prob:6.1%} {bar:<20} {text(tok)!r} ({tok})\n")
    else:
        out.append("the target's top-5 was not recorded in this trace\n", style="grey50")
    out.append("Esc or Enter closes", style="grey50")
    return out


class DetailsScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter,q", "dismiss", "close")]

    def __init__(self, body: Text):
        super().__init__()
        self.body = body

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.body, id="details")


class NumberScreen(ModalScreen[int | None]):
    """Asks for a whole number; dismisses with it, or None on Esc or bad input."""

    BINDINGS = [Binding("escape", "dismiss(None)", "cancel")]

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.question)
            yield Input(placeholder="number, Enter to go", type="integer", id="number")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            self.dismiss(int(event.value))
        except ValueError:
            self.dismiss(None)
