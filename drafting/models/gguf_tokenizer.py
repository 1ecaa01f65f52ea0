"""A GGUF file's tokenizer as transformers reads it, without converting the weights.

Engines that run the GGUF itself (llama.cpp) still take prompts through goose's chat template and the same
tokenizer as the transformers engine, so both engines see the same token ids. transformers builds that tokenizer
from the file's metadata in seconds to tens of seconds (a large vocabulary's merges), so it is saved once under
the cache folder; a whole conversion of the file (drafting.models.gguf_convert) already holds it. A cache that
cannot be written keeps it for this process only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from drafting.disk_cache import cannot_write, drop_abandoned, note_unwritable, temporary_beside
from drafting.models.gguf_convert import cached_folder, converted_folder, is_finished

DONE = "goose-tokenizer.json"  # written last: its presence says the folder is whole

_KEPT: dict[Path, object] = {}  # GGUF file -> its tokenizer, for the life of the process


def tokenizer_folder(gguf: Path) -> Path:
    folder = cached_folder(gguf)
    return folder.parent.parent / "tokenizer" / folder.name


def gguf_tokenizer(gguf: Path):
    from transformers import AutoTokenizer

    if gguf in _KEPT:
        return _KEPT[gguf]
    for folder in (converted_folder(gguf), tokenizer_folder(gguf)):
        if (is_finished(folder) or (folder / DONE).is_file()):
            try:
                _KEPT[gguf] = AutoTokenizer.from_pretrained(str(folder))
                return _KEPT[gguf]
            except (OSError, ValueError):
                pass  # damaged: made again below
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    _save(tokenizer, tokenizer_folder(gguf))
    _KEPT[gguf] = tokenizer
    return tokenizer


def _save(tokenizer, folder: Path) -> None:
    """Write ``tokenizer`` into ``folder`` whole or not at all (a temporary folder renamed into place)."""
    tmp = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        drop_abandoned(folder)
        tmp = temporary_beside(folder, folder=True)
        tokenizer.save_pretrained(tmp)
        (tmp / DONE).write_text("{}")
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.rename(tmp, folder)
        tmp = None
    except OSError as exc:
        if not cannot_write(exc) and not folder.is_dir():
            raise
        if cannot_write(exc):
            note_unwritable(folder.parent, exc, "the tokenizer is kept for this run only")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
