"""The errors goose raises for the user: each carries one sentence meant to be shown as it is."""

from __future__ import annotations


class ModelError(Exception):
    """A model could not be loaded; the message is one sentence meant for the user."""


class ContextError(ValueError):
    """The prompt does not fit the model's context window; one sentence."""


class UnsupportedModelError(ValueError):
    """A speculator was asked to run on a model goose cannot verify trees on exactly; one sentence."""


class SpecError(ValueError):
    """A speculator spec names an unknown speculator or option, or a bad value; one sentence."""


class WeightsError(ValueError):
    """A weight format cannot be used with this model, device or dtype; one sentence."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception raised by code outside goose (transformers, torch), or its type's name when
    it says nothing: what a one-sentence error can quote."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class EngineError(RuntimeError):
    """An engine failed to run a pass (llama.cpp refused a batch, ran out of KV cells); one sentence."""
