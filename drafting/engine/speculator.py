"""The one small interface every speculator implements, its typed options, and the error for a bad spec."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from drafting.engine.tree import Draft


@dataclass(frozen=True)
class Option:
    """A speculator option settable as ``name:key=value``; ``kind`` parses the text."""

    default: object
    help: str
    kind: type = str
    choices: tuple = ()  # extra accepted words besides values of ``kind`` (e.g. "auto")


@dataclass
class StepResult:
    """What the verifier tells the speculator after a step."""

    logits: torch.Tensor  # (draft.size, V): tree nodes first, then draft rows
    accepted: list[int]  # accepted tree node indices, root first
    emitted: list[int]  # tokens appended to the context this step
    prefix_len: int  # cached tokens before this step (the root's position)


class Speculator:
    """Proposes a draft for the next step from the context; learns from each verified step.

    ``context`` is prompt + output so far; its last token is the root of the next draft. Speculators never call
    the model themselves: in-model drafting rides as draft rows in the verification pass.
    """

    name: str = ""
    summary_line: str = ""
    options: dict[str, Option] = {}

    def __init__(self, **settings):
        self.settings = {k: o.default for k, o in self.options.items()}
        self.settings.update(settings)

    def bind(self, lm) -> None:
        """The Decoder hands over the loaded model before the first ``reset`` (e.g. to read its verify cost
        curve); may be called again by each new Decoder. Default: nothing to do."""

    def reset(self, context: list[int]) -> None:
        """A new generation starts with this prompt (its last token is the first root)."""

    def resume(self, context: list[int]) -> bool:
        """A new generation continues a context this speculator has seen (a chat turn on a kept KV cache):
        catch up on the tokens added since and keep what was learned, or return False to be ``reset``."""
        return False

    @property
    def prefill_logit_rows(self) -> int | None:
        """How many of the prefill's last positions ``observe_prefill`` reads logits for (None = all, 0 = none).
        Each costs the output layer over the vocabulary, so a speculator asks only for what it uses."""
        return 0

    def observe_prefill(self, ids: list[int], logits: torch.Tensor | None) -> None:
        """Logits of the last ``len(logits)`` prefill positions (None when ``prefill_logit_rows`` is 0): row i
        predicts the token after ``ids[len(ids) - len(logits) + i]``."""

    def propose(self, context: list[int]) -> Draft:
        raise NotImplementedError

    def observe(self, draft: Draft, result: StepResult) -> None:
        """The verified outcome of ``draft``; ``result.emitted`` has been appended to the context."""

    def stats(self) -> dict:
        """Counters for bench summaries (offered/accepted per source, routes, budgets, ...)."""
        return {}

    def spec(self) -> str:
        changed = {k: v for k, v in self.settings.items() if self.options.get(k) and v != self.options[k].default}
        if not changed:
            return self.name
        return self.name + ":" + ",".join(f"{k}={_fmt(v)}" for k, v in changed.items())


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


