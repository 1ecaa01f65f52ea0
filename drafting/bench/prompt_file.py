"""Prompt files for benchmarks: JSON Lines, one object per line with a string ``prompt`` and optional ``id``,
``task`` and ``turns`` (a list of user turns, run in order; the first one is the prompt).

Every problem is reported as one sentence naming ``FILE:LINE``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


class PromptFileError(ValueError):
    """A prompt file is missing, empty or has a bad line; the message is one sentence."""


@dataclass(frozen=True)
class Prompt:
    id: str
    task: str
    turns: tuple[str, ...]  # user turns in order; a single-turn prompt has one
    line: int  # 1-based line in the file

    @property
    def text(self) -> str:
        return self.turns[0]


def read_prompts(path: str | Path, tasks: set[str] | None = None, limit: int | None = None) -> list[Prompt]:
    """Read and check every line of ``path``; keep prompts of ``tasks`` (if given), at most ``limit``."""
    p = Path(path)
    if not p.exists():
        raise PromptFileError(f"Prompt file {str(p)!r} does not exist.")
    if p.is_dir():
        raise PromptFileError(f"{str(p)!r} is a folder, not a prompt file.")
    try:
        # utf-8-sig: a byte-order mark some editors write is not part of the first line. Lines end at \n only:
        # str.splitlines() also breaks at U+2028, U+2029, U+0085 and other characters a JSON string may hold.
        lines = [line.removesuffix("\r") for line in p.read_text(encoding="utf-8-sig").split("\n")]
    except UnicodeDecodeError:
        raise PromptFileError(f"Prompt file {str(p)!r} is not UTF-8 text.") from None
    except OSError as exc:
        raise PromptFileError(f"Cannot read prompt file {str(p)!r}: {exc.strerror}.") from None
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        prompt = _parse_line(line, f"{p}:{number}", number)
        if prompt.id in seen:
            raise PromptFileError(f"{p}:{number}: prompt id {prompt.id!r} was already used on line {seen[prompt.id]}.")
        seen[prompt.id] = number
        prompts.append(prompt)
    if not prompts:
        raise PromptFileError(f"Prompt file {str(p)!r} is empty (no prompt lines).")
    if tasks:
        known = {q.task for q in prompts}
        unknown = sorted(set(tasks) - known)
        if unknown:
            raise PromptFileError(
                f"No prompts of task {', '.join(map(repr, unknown))} in {str(p)!r}; its tasks: {', '.join(sorted(known))}."
            )
        prompts = [q for q in prompts if q.task in tasks]
    if limit is not None:
        prompts = prompts[:limit]
    return prompts


def _parse_line(line: str, where: str, number: int) -> Prompt:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise PromptFileError(f"{where}: not valid JSON ({exc.msg}).") from None
    if not isinstance(obj, dict):
        raise PromptFileError(f"{where}: each line must be a JSON object with a string \"prompt\".")
    turns = obj.get("turns")
    if turns is not None:
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
            raise PromptFileError(f"{where}: \"turns\" must be a non-empty list of strings.")
        blank = next((k for k, t in enumerate(turns, start=1) if not t.strip()), None)
        if blank is not None:
            raise PromptFileError(f"{where}: turn {blank} of \"turns\" is only whitespace.")
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise PromptFileError(f"{where}: the line has no non-empty string \"prompt\".")
    if not prompt.strip():
        raise PromptFileError(f"{where}: the \"prompt\" is only whitespace.")
    if turns is None:
        turns = [prompt]
    elif turns[0] != prompt:
        turns = [prompt] + turns  # "prompt" comes first, "turns" continue the conversation
    pid = obj.get("id", f"line{number}")
    task = obj.get("task", "default")
    if not isinstance(pid, (str, int)) or not isinstance(task, str):
        raise PromptFileError(f"{where}: \"id\" must be a string or number and \"task\" a string.")
    return Prompt(id=str(pid), task=task, turns=tuple(turns), line=number)
