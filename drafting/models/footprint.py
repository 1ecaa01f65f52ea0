"""What loading a model will take in memory, read from its files' headers before any weight is loaded, so a model
that cannot fit is refused in one sentence instead of pushing the machine into swap or the kernel's OOM killer.

The weights dominate: their element count times the size of the load dtype. They are counted where they will be:
in the GPU's free memory for a model loaded straight onto one (it never sits whole in host memory), in host memory
otherwise. A GGUF seen for the first time is
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


def gpu_free_bytes(device: torch.device) -> int | None:
    """Free memory on the GPU ``device`` now, as its driver counts it (other processes' use included); None where
    it cannot be read."""
    try:
        free, _total = torch.cuda.mem_get_info(device)
    except (RuntimeError, AssertionError, ValueError):  # no CUDA, or a device torch cannot query
        return None
    return int(free)


def check_gpu_room(title: str, weights: int | None, dtype: torch.dtype, device: torch.device) -> None:
    """``ModelError`` (one sentence: what it needs, what is free, what to do instead) when ``weights`` in ``dtype``
    need more than the free memory of the GPU ``device``."""
    free = gpu_free_bytes(device)
    if weights is None or free is None:
        return
    need = weights * (torch.finfo(dtype).bits // 8)
    if need <= free:
        return
    smaller = ", use --dtype bfloat16" if torch.finfo(dtype).bits > 16 else ""
    raise ModelError(f"{title} does not fit on {device}: it needs about {gib(need)} for its weights in "
                     f"{str(dtype).replace('torch.', '')} and {gib(free)} of the GPU's memory is free; free some of "
                     f"it{smaller}, or spread the model over several GPUs with --device-map auto.")


def check_room_on(title: str, weights: int | None, dtype: torch.dtype, gpu: torch.device | None) -> None:
    """Room to load ``weights`` in ``dtype`` where they go: on ``gpu`` when they are loaded straight onto it, in
    host memory when ``gpu`` is None (ModelError, one sentence, either way)."""
    if gpu is not None:
        check_gpu_room(title, weights, dtype, gpu)
    else:
        check_room(title, weights, dtype)
