"""The one small interface every speculator implements, its typed settings, and what the verifier tells it.

A speculator's settings are a frozen dataclass (a ``Settings`` subclass) whose fields are made by ``option``:
the field's metadata says how the command line sets it (``name:key=value``), its help and the extra words it
accepts (e.g. "auto"); ``__post_init__`` checks the values and raises ``SpecError`` with one sentence.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from drafting.engine.step_reads import StepReads
from drafting.engine.tree import Draft

_WANT = {bool: "on or off", int: "a non-negative integer", float: "a non-negative number", tuple: "numbers joined by /"}


@dataclass(frozen=True)
class Option:
    """One setting as the command line sees it: ``kind`` parses its text; ``words`` are accepted as they are
    besides values of ``kind`` (e.g. "auto")."""

    default: object
    help: str
    kind: type = str
    words: tuple = ()

    def parse(self, text: str):
        """The value ``text`` stands for; ValueError when it is neither one of ``words`` nor a value of ``kind``
        (numbers must not be negative)."""
        if text in self.words:
            return text
        if self.kind is bool:
            low = text.lower()
            if low in ("on", "true", "yes", "1"):
                return True
            if low in ("off", "false", "no", "0"):
                return False
            raise ValueError(text)
        if self.kind is tuple:  # n-gram lengths and the like: "5/4/3"
            return tuple(int(x) for x in text.replace("-", "/").split("/") if x)
        value = self.kind(text)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise ValueError(text)
        return value

    def format(self, value) -> str:
        """The text ``parse`` reads back as ``value``."""
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, tuple):
            return "/".join(str(x) for x in value)
        return str(value)

    def wants(self) -> str:
        """What a value must be, for error sentences: "a non-negative integer (or auto)"."""
        what = _WANT.get(self.kind, self.kind.__name__)
        return what + (f" (or {', '.join(self.words)})" if self.words else "")


def option(default, help: str, kind: type | None = None, words: tuple = ()):
    """A settings field settable as ``name:key=value``; ``kind`` (default: the default's type) parses its text."""
    return dataclasses.field(default=default, metadata={"option": Option(default, help, kind or type(default), words)})


@dataclass(frozen=True)
class Settings:
    """A speculator's settings; subclasses declare fields with ``option`` (their order is the order ``spec()``
    writes them in) and check them in ``__post_init__``. This base has none (``ar``)."""

    @classmethod
    def options(cls) -> dict[str, Option]:
        out = {}
        for f in dataclasses.fields(cls):
            if "option" not in f.metadata:
                raise TypeError(f"{cls.__name__}.{f.name} needs to be declared with option(default, help).")
            out[f.name] = f.metadata["option"]
        return out

    def changed(self) -> dict[str, object]:
        """The settings that differ from their defaults, in declaration order."""
        return {k: getattr(self, k) for k, o in self.options().items() if getattr(self, k) != o.default}


@dataclass
class StepResult:
    """What the verifier tells the speculator after a step."""

    logits: torch.Tensor  # (draft.size, V): tree nodes first, then draft rows
    accepted: list[int]  # accepted tree node indices, root first
    emitted: list[int]  # tokens appended to the context this step
    prefix_len: int  # cached tokens before this step (the root's position)
    # what the host reads of ``logits``, in the step's one copy off the device (made here when not given)
    reads: StepReads | None = None

    def __post_init__(self):
        if self.reads is None:
            self.reads = StepReads(self.logits)


class Speculator:
    """Proposes a draft for the next step from the context; learns from each verified step.

    ``context`` is prompt + output so far; its last token is the root of the next draft. Speculators never call
    the model themselves: in-model drafting rides as draft rows in the verification pass.

    A subclass with a ``name`` is registered (``drafting.speculators.registry``) at its ``order``; its settings
    are an instance of ``settings_class``, built from the keyword arguments.
    """

    name: ClassVar[str] = ""
    summary_line: ClassVar[str] = ""
    order: ClassVar[int] = 1000  # place in the registry and in listings (goose's own: 10 to 70)
    draws_rows: ClassVar[bool] = False  # drafts in-model rows (a draft forest beside the tree: PTD's view in viz)
    reads_argmax: ClassVar[bool] = False  # observe reads every row's argmax (``result.reads.argmax()``)
    settings_class: ClassVar[type[Settings]] = Settings
    options: ClassVar[dict[str, Option]] = {}  # the settings' options by key, read from settings_class

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.options = cls.settings_class.options()

    def __init__(self, **settings):
        self.settings = self.settings_class(**settings)

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

    def reads_top_k(self, draft: Draft) -> int:
        """How many of each tree row's most likely tokens ``observe`` reads for ``draft``
        (``result.reads.top(k, len(draft.tree))``), said before the step so that they come off the device with
        everything else the step reads. Default: none."""
        return 0

    def observe(self, draft: Draft, result: StepResult) -> None:
        """The verified outcome of ``draft``; ``result.emitted`` has been appended to the context. Read the
        logits on the host through ``result.reads`` (one copy off the device per step), not ``result.logits``."""

    def stats(self) -> dict:
        """Counters for bench summaries (offered/accepted per source, routes, budgets, ...)."""
        return {}

    def spec(self) -> str:
        """The canonical spec: the name, then the settings that differ from their defaults (``create`` reads it
        back to the same settings)."""
        changed = self.settings.changed()
        if not changed:
            return self.name
        return self.name + ":" + ",".join(f"{k}={self.options[k].format(v)}" for k, v in changed.items())
