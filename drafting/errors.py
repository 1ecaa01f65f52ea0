"""The errors goose raises for the user: each carries one sentence meant to be shown as it is."""

from __future__ import annotations

import re


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


class OutOfMemory(EngineError):
    """The GPU ran out of memory while decoding; one sentence."""


# torch's CUDA out-of-memory error under each of its names: torch.OutOfMemoryError (torch.cuda.OutOfMemoryError is
# the same class), torch._C._OutOfMemoryError in older releases; older still raised a RuntimeError saying so
OUT_OF_MEMORY_NAMES = ("OutOfMemoryError", "_OutOfMemoryError")
_NEEDED = re.compile(r"Tried to allocate ([\d.]+ ?[KMGTP]?i?B)")
_FREE = re.compile(r"([\d.]+ ?[KMGTP]?i?B) (?:is )?free")  # "of which 1.25 GiB is free"; older: "4.56 MiB free"


def is_gpu_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's CUDA out-of-memory error (told by name: this module imports nothing)."""
    if any(c.__name__ in OUT_OF_MEMORY_NAMES and c.__module__.startswith("torch") for c in type(exc).__mro__):
        return True
    return isinstance(exc, RuntimeError) and str(exc).startswith("CUDA out of memory")


def gpu_out_of_memory(exc: BaseException, doing: str, instead: str) -> str | None:
    """One sentence for torch's CUDA out-of-memory error met ``doing`` something: how much more it needed and how
    much was free (read from torch's message where it says), and what to do ``instead``; None for any other error."""
    if not is_gpu_out_of_memory(exc):
        return None
    text = str(exc)
    needed, free = _NEEDED.search(text), _FREE.search(text)
    what = f"it needed {needed.group(1)} more" if needed else "it needed more than was free"
    if needed and free:
        what += f" with {free.group(1)} free"
    return f"The GPU ran out of memory {doing}: {what}; {instead}."


def run_failure(exc: BaseException) -> str | None:
    """The one sentence an error met while running carries (an engine's, the GPU out of memory), for a face to
    show as it is; None for any other error, a bug whose traceback is wanted."""
    if isinstance(exc, EngineError):
        return str(exc)
    return gpu_out_of_memory(exc, "while running", "free some of its memory or ask for less (a shorter prompt, fewer "
                             "new tokens, a smaller model)")
