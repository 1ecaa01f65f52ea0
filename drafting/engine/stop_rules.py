"""When a generation cannot start or must stop: a prompt that leaves the context window no room, and the
end-of-sequence tokens. Shared by goose's decode loop and the plain-decoding baselines, so every row of a bench
stops by the same rules."""

from __future__ import annotations

from drafting.errors import ContextError


def check_fits(prompt_ids: list[int], max_context: int, window: str = "the model's context window of") -> None:
    """One sentence (ContextError) when the prompt is empty or leaves no room for a new token."""
    if not prompt_ids:
        raise ContextError("The prompt is empty.")
    if len(prompt_ids) + 1 > max_context:
        raise ContextError(f"The prompt has {len(prompt_ids)} tokens, more than {window} {max_context} leaves room for.")


def cut_at_eos(tokens: list[int], eos_ids) -> tuple[list[int], bool]:
    """``tokens`` up to and including the first end-of-sequence token, and whether there was one."""
    for i, tok in enumerate(tokens):
        if tok in eos_ids:
            return tokens[: i + 1], True
    return tokens, False
