"""What loading a model will take in memory, read from its files' headers before any weight is loaded, so a model
that cannot fit is refused in one sentence instead of pushing the machine into swap or the kernel's OOM killer.

The weights dominate: their element count times the size of the load dtype. A GGUF seen for the first time is
also converted once (drafting.models.gguf_convert), tensor by tensor, which needs far less than the load after it;
only a file transformers must read whole (its packed-weight architectures) needs the de-quantised float32 model
plus the copy written out.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import torch

from drafting.errors import ModelError
from drafting.machine.memory import available_bytes, gib
from drafting.models.safetensors_stream import read_header, tensor_files

CONVERSION_BYTES_PER_WEIGHT = 4 + 2  # a whole conversion: the float32 model transformers de-quantises into, its copy


def folder_weights(folder: Path) -> int | None:
    """How many weights the folder's safetensors files hold, from their headers; None without such files."""
    files = tensor_files(folder)
    try:
        headers = [read_header(path)[0] for path in files]
    except (OSError, ValueError, struct.error):
        return None
    return sum(math.prod(info["shape"]) for header in headers for info in header.values()) if files else None


def check_room(title: str, weights: int | None, dtype: torch.dtype, converting: bool = False,
               instead: str | None = None) -> None:
    """``ModelError`` (one sentence: what it needs, what is free, what to do ``instead``) when loading ``weights``
    in ``dtype`` (or converting them from a GGUF file) needs more memory than is available now."""
    free = available_bytes()
    if weights is None or free is None:
        return
    need = weights * (CONVERSION_BYTES_PER_WEIGHT if converting else torch.finfo(dtype).bits // 8)
    if need <= free:
        return
    what = ("to convert its GGUF file once" if converting
            else f"for its weights in {str(dtype).replace('torch.', '')}")
    if instead is None:
        smaller = "; try --dtype bfloat16" if torch.finfo(dtype).bits > 16 and not converting else ""
        instead = f"close other programs{smaller}"
    raise ModelError(f"{title} does not fit: it needs about {gib(need)} {what} and {gib(free)} of memory is "
                     f"available; {instead}.")
